"""From a run's results to one recommended next action: the one function the Prefect artifacts,
the report, the flow's log and the CLI all read.

The run first: an incomplete run (rollouts missing) is completed before anything else, then an
unhealthy one (an integrity check beyond its threshold) has its health fixed: the scores of
either mislead. Except where what breaks the health is an external agent: when the only checks
that fail are those its failures break (`AGENT_HEALTH`: the failed share, rollouts without a
model call, its call record) and the evidence recommends harness work for the rollouts it lost
(the confirming experiment runs them under another agent), the decision is that harness work:
fixing the agent is fixing the health.

Otherwise each next action is a hypothesis (`gymflow.analysis.hypotheses`) with a prediction
about the stored rollouts, and the rollouts where its prediction holds are its evidence
(`gymflow.analysis.evidence`): a token limit is harness work only where the cut answers were
on their way to an answer, a prompt change only where the answer is there in
another form or the prompt's placeholder was copied, a verifier repair only where the
verifier's own lenient reading passes the expected answer, the chat format where the output
copies the prompt back.

The rules, on the evidence: measurement first. Verifier repair wins when its evidence reaches
5% of all the evidence, then the chat format, harness work and prompt change, each at 10%:
until those are fixed, what the run measures is not the policy, and the other numbers are
distorted. Otherwise the action with the most evidence wins; two sharing the most is a tie.

The margin: the rules run again on 2,000 bootstrap resamples of the tasks, and the action is
recommended only when it wins at least 90% of them. Otherwise the decision is "undecided
between" it and the action that wins most of the rest, with the one-factor experiment that
would decide. Either way the decision names the experiment that would confirm it, on the
affected tasks only (`gym eval decide RUN --confirm` runs it), and what the run cannot show:
skill improvement needs repeats above one at a temperature above zero."""

from __future__ import annotations

import numpy as np

from gymflow.analysis.health_checks import AGENT_RECORD_CHECKS
from gymflow.analysis.hypotheses import (
    ACTIONS,
    AGENT_FACTORS,
    AMBIGUOUS,
    HYPOTHESES,
    actions_of,
    can_show_skill,
    categories,
    cut_form_actions,
    experiment,
    support,
    tasks_of,
)
from gymflow.analysis.margin import LEVEL, RESAMPLES, challenger, margin, resampled_winners
from gymflow.analysis.results import (
    Candidate,
    Decision,
    Diagnosis,
    Evidence,
    EvidencePattern,
    Experiment,
    Health,
    Profile,
)

__all__ = ["ACTIONS", "BLOCKING", "COMPLETE_RUN", "FIX_HEALTH", "LABELS", "decide", "recommend"]

#: what comes before the evidence: scores of an incomplete or unhealthy run mislead
COMPLETE_RUN, FIX_HEALTH, UNDECIDED = "complete_run", "fix_health", "undecided"
LABELS: dict[str, str] = {COMPLETE_RUN: "complete the run", FIX_HEALTH: "fix health first"}

#: Measurement first: the actions that change what the run measures, and the share of the
#: evidence at which each wins outright, in priority order. Evidence shared by two of them (a
#: cut answer outside the verifier's form, with nothing uncut to tell) blocks for neither.
BLOCKING = (
    ("verifier_repair", 0.05),
    ("chat_format", 0.10),
    ("harness_work", 0.10),
    ("prompt_change", 0.10),
)

_ORDER = list(ACTIONS)

#: The health checks an external agent's failures break (a crash is a failed rollout, often
#: one with no model call; its call record is the proxy's against its own log).
AGENT_HEALTH = ("failed_share", "no_model_calls", *AGENT_RECORD_CHECKS)


def decide(
    health: Health,
    profile: Profile,
    diagnosis: Diagnosis,
    *,
    verifier_lenient: dict | None = None,
    template: str | None = None,
) -> Decision:
    """The recommended next action: complete the run, then fix its records, then what the
    diagnosis's evidence points to (`recommend`). When the run comes first, the evidence's own
    pick is kept as the runner-up: what to do once the run is complete and healthy."""
    recommended = recommend(diagnosis, verifier_lenient=verifier_lenient, template=template)
    missing, expected = profile.coverage.missing, profile.coverage.expected
    if missing:
        why = (
            f"{missing} of the {expected} expected rollouts are missing, so the scores describe "
            "part of the run: resume it (retry the flow run, or `gym eval run --resume`) before "
            "reading them"
        )
        return _first(COMPLETE_RUN, why, recommended)
    if health.verdict != "healthy" and _agent_broke_health(health, recommended):
        why = (
            f"health checks fail ({', '.join(health.broken)}) on what an external agent lost: "
            f"the harness failed, not the records. {recommended.why}"
        )
        return recommended.model_copy(update={"why": why})
    if health.verdict != "healthy":
        why = (
            f"health checks fail beyond their thresholds ({', '.join(health.broken)}): until "
            "they pass, the scores cannot be trusted (see `gym eval health`)"
        )
        return _first(FIX_HEALTH, why, recommended)
    return recommended


def _agent_broke_health(health: Health, recommended: Decision) -> bool:
    """Whether an external agent explains the unhealthy verdict: only `AGENT_HEALTH` checks
    fail, and the evidence recommends harness work whose confirming experiment is the agent's
    (its lost rollouts are the largest part of the harness evidence)."""
    experiment = recommended.experiment
    return (
        recommended.action == "harness_work"
        and experiment is not None
        and experiment.factor in AGENT_FACTORS
        and bool(health.broken)
        and set(health.broken) <= set(AGENT_HEALTH)
    )


def _first(action: str, why: str, recommended: Decision) -> Decision:
    return recommended.model_copy(
        update={
            "action": action,
            "label": LABELS[action],
            "why": why,
            "evidence": None,
            "runner_up": recommended.evidence or recommended.runner_up,
            "undecided": [],
        }
    )


def _patterns(evidence: Evidence) -> list[EvidencePattern]:
    """The evidence patterns, with the tasks that gave no evidence as one more (they are
    resampled too)."""
    quiet = evidence.tasks - sum(p.tasks for p in evidence.patterns)
    extra = [EvidencePattern(bucket="always_pass", counts={}, tasks=quiet)] if quiet > 0 else []
    return [*evidence.patterns, *extra]


def _matrices(evidence: Evidence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(patterns x (support per action, then blocking support per BLOCKING action), evidence
    rollouts per task, tasks per pattern)."""
    patterns = _patterns(evidence)
    shared = set(AMBIGUOUS) if len(cut_form_actions(evidence)) > 1 else set()
    rows = []
    for pattern in patterns:
        by_action = support(pattern, evidence)
        unshared = support(
            pattern.model_copy(
                update={"counts": {k: v for k, v in pattern.counts.items() if k not in shared}}
            ),
            evidence,
        )
        rows.append([by_action[a] for a in _ORDER] + [unshared[a] for a, _ in BLOCKING])
    columns = len(_ORDER) + len(BLOCKING)
    matrix = np.array(rows, dtype=float).reshape(len(rows), columns)
    totals = np.array([sum(p.counts.values()) for p in patterns], dtype=float)
    tasks = np.array([p.tasks for p in patterns], dtype=float)
    return matrix, totals, tasks


#: the rule's verdict when two actions share the most evidence
TIE = -2


def _rule(matrix: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """The winner of each row by the rules (index into ACTIONS; -1: no evidence; TIE: two
    actions share the most evidence)."""
    by_action, blocking = matrix[:, : len(_ORDER)], matrix[:, len(_ORDER) :]
    safe = np.where(totals > 0, totals, 1.0)
    top = by_action.max(axis=1)
    shared = (by_action == top[:, None]).sum(axis=1) > 1
    winners = np.where(top > 0, np.where(shared, TIE, by_action.argmax(axis=1)), -1)
    # measurement first: the earliest blocking action over its threshold wins outright
    for column in reversed(range(len(BLOCKING))):
        action, threshold = BLOCKING[column]
        held = blocking[:, column]
        winners = np.where((held > 0) & (held / safe >= threshold), _ORDER.index(action), winners)
    return winners


def _task_ids(action: str, evidence: Evidence) -> list[str]:
    ids: set[str] = set()
    for key, tasks in evidence.task_ids.items():
        name, _, bucket = key.partition("|")
        if action in actions_of(name, bucket, evidence):
            ids.update(tasks)
    return sorted(ids)


def _examples(action: str, evidence: Evidence, cats: dict[str, int]) -> list[str]:
    found: list[str] = []
    for name in sorted(cats, key=lambda n: -cats[n]):
        found.extend(e for e in evidence.examples.get(name, []) if e not in found)
    return found[:5]


def _notes(action: str, evidence: Evidence) -> list[str]:
    """What the evidence for `action` is, and against it, in words."""
    totals = evidence.totals
    notes: list[str] = []
    if action == "harness_work":
        lost, unrecorded = totals.get("agent_failed", 0), totals.get("unrecorded", 0)
        if lost:
            by_count = sorted(evidence.agent_kinds.items(), key=lambda kv: -kv[1])
            kinds = ", ".join(f"{kind}: {n}" for kind, n in by_count)
            notes.append(
                f"{lost} rollout(s) were lost by the external agent ({kinds}): a failure of the "
                "harness, never the model's answer, so no model training is read into them"
            )
        if unrecorded:
            notes.append(
                f"{unrecorded} rollout(s) have a broken model-call record (calls the proxy "
                "refused or took after the deadline, calls the agent's log counts and the proxy "
                "did not record, text no recorded call produced, or no call at all): what was "
                "judged is not evidence of the model"
            )
        cut = totals.get("cut_on_way", 0)
        astray = totals.get("cut_astray", 0)
        if cut:
            notes.append(
                f"{cut} rollout(s) were cut at the output-token limit on their way to an answer "
                "(the answer's form begun where it was cut, the expected answer in the cut "
                "text, the reference beginning as it does, or an uncut repeat passing)"
            )
        if astray:
            notes.append(
                f"{astray} cut rollout(s) were not on their way to an answer (loops, rambling): "
                "the limit did not cost them, so they are not counted here"
            )
        if totals.get("tools_ignored"):
            notes.append(
                f"{totals['tools_ignored']} rollout(s) were offered tools the model server "
                "ignored (fewer calls than a policy that uses them makes by chance): check its "
                "function-calling setup and tool_choice"
            )
    if action == "chat_format" and totals.get("echo"):
        notes.append(
            f"{totals['echo']} rollout(s) copy the prompt back, write chat turn markers or loop "
            "the prompt's placeholder: the model continues the prompt instead of answering it"
        )
    if action == "prompt_change":
        if totals.get("placeholder"):
            notes.append(
                f"{totals['placeholder']} rollout(s) copy the prompt's placeholder instead of "
                "filling it in"
            )
        if totals.get("other_form"):
            notes.append(
                f"{totals['other_form']} rollout(s) hold the expected answer outside the form "
                "the verifier reads: a reading in another form would pass them"
            )
    if totals.get("cut_other_form") and action in ("harness_work", "prompt_change"):
        notes.append(
            f"{totals['cut_other_form']} cut rollout(s) hold the expected answer but not the "
            f"verifier's form; of the uncut rollouts {evidence.uncut_formless} miss the form and "
            f"{evidence.uncut_formed} hold it"
        )
    if action == "verifier_repair":
        for name, text in (
            ("lenient_right", "failed answer(s) the verifier's own lenient reading passes as the "
             "expected answer (a verifier parameter that rejects right answers)"),
            ("unjudged", "rollout(s) the verifier could not judge"),
            ("passed_unanswered", "pass(es) without an answer in the verifier's form"),
        ):  # fmt: skip
            if totals.get(name):
                notes.append(f"{totals[name]} {text}")
    if action in ("model_training", "skill_improvement"):
        wrong = totals.get("wrong", 0) + totals.get("loop", 0) + totals.get("cut_astray", 0)
        if wrong:
            notes.append(
                f"{wrong} rollout(s) answer wrong, loop or ramble, with no sign of the "
                "verifier, the format, the prompt or the limit"
            )
        if totals.get("cut_astray"):
            notes.append(
                f"{totals['cut_astray']} of them were cut at the output-token limit, but not on "
                "their way to an answer: the policy's rambling, not the limit"
            )
    return notes


def _candidates(
    evidence: Evidence, verifier_lenient: dict | None, template: str | None, verifier: str
) -> dict[str, Candidate]:
    total = sum(evidence.totals.values())
    out = {}
    for action, label in ACTIONS.items():
        cats = categories(action, evidence)
        rollouts = sum(cats.values())
        hypothesis = HYPOTHESES[action]
        out[action] = Candidate(
            action=action,
            label=label,
            rollouts=rollouts,
            share=rollouts / total if total else 0.0,
            threshold=dict(BLOCKING).get(action),
            fired=rollouts > 0,
            categories=cats,
            examples=_examples(action, evidence, cats),
            notes=_notes(action, evidence),
            hypothesis=hypothesis.claim,
            prediction=hypothesis.prediction,
            tasks=tasks_of(action, evidence),
            experiment=experiment(
                action,
                evidence,
                _task_ids(action, evidence),
                verifier=verifier,
                lenient=verifier_lenient,
                template=template,
            )
            if rollouts
            else None,
        )
    return out


def _cannot_show(evidence: Evidence) -> list[str]:
    if can_show_skill(evidence):
        return []
    temperature = "unset" if evidence.temperature is None else f"{evidence.temperature:g}"
    return [
        "skill improvement: it needs repeats above one at a temperature above zero, and this "
        f"run has {evidence.repeats} repeat(s) at temperature {temperature}: a task that "
        "never passed here may be one the policy solves sometimes"
    ]


_COST = {"reverify": 0, "rerun": 1, "none": 2}


def _deciding(a: Candidate, b: Candidate) -> Experiment | None:
    """The experiment that decides between `a` and `b`: the cheaper one that gymflow can run
    (between skill and capability, more repeats on the tasks that never passed)."""
    found = [c.experiment for c in (a, b) if c.experiment is not None]
    return min(found, key=lambda e: (_COST[e.kind], e.action != "model_training"), default=None)


def recommend(
    diagnosis: Diagnosis,
    *,
    verifier_lenient: dict | None = None,
    template: str | None = None,
) -> Decision:
    """The action the diagnosis's evidence points to, by the rules above: `action` is None only
    when there is no evidence at all (every stored rollout passed), `undecided` when no action
    wins by the margin. `verifier_lenient` (the verifier's lenient parameters) and `template`
    (the run's prompt template) shape the confirming experiments."""
    evidence = diagnosis.evidence
    if evidence is None:
        return Decision(
            action=None,
            label=None,
            why="this diagnosis holds no evidence classes (an older gymflow made it): "
            "diagnose the run again",
            evidence=None,
            runner_up=None,
            candidates=[],
            rules=__doc__ or "",
        )
    verifier = diagnosis.verifier_version.partition("@")[0]
    typed = _candidates(evidence, verifier_lenient, template, verifier)
    cannot_show = _cannot_show(evidence)
    matrix, totals, tasks = _matrices(evidence)
    leader = int(_rule((tasks @ matrix)[None, :], np.array([tasks @ totals]))[0])
    if leader == -1:
        return Decision(
            action=None,
            label=None,
            why="no evidence: every stored rollout passed and no verifier suspect was found",
            evidence=None,
            runner_up=None,
            candidates=list(typed.values()),
            rules=__doc__ or "",
            cannot_show=cannot_show,
        )
    winners = resampled_winners(matrix, totals, tasks, _rule)
    by_evidence = sorted(
        (c for c in typed.values() if c.rollouts > 0),
        key=lambda c: (-c.rollouts, _ORDER.index(c.action)),
    )
    if leader == TIE:  # two actions share the most evidence: the earlier leads, undecided
        leader = _ORDER.index(by_evidence[0].action)
    held = margin(winners, leader)
    chosen = typed[_ORDER[leader]]
    ranked = [c for c in by_evidence if c is not chosen]
    rival_index = challenger(winners, leader, range(len(_ORDER)))
    rival = typed[_ORDER[rival_index]] if rival_index is not None else None
    if rival is None and held < LEVEL and ranked:
        rival = ranked[0]  # the resamples it did not win were ties with the runner-up
    runner_up = rival or (ranked[0] if ranked else None)
    against = (
        f"; runner-up: {runner_up.label} ({runner_up.rollouts} rollout(s), "
        f"{runner_up.share:.0%} of the evidence)"
        if runner_up
        else ""
    )
    base = dict(
        candidates=list(typed.values()),
        rules=__doc__ or "",
        margin=held,
        resamples=RESAMPLES,
        cannot_show=cannot_show,
    )
    if held >= LEVEL or rival is None:
        why = (
            f"{chosen.hypothesis}. Its prediction ({chosen.prediction}) holds on "
            f"{chosen.rollouts} rollout(s) of {chosen.tasks} task(s), {chosen.share:.0%} of the "
            f"evidence, and it wins {held:.0%} of {RESAMPLES} resamples of the tasks{against}"
        )
        return Decision(
            action=chosen.action,
            label=chosen.label,
            why="; ".join([why, *chosen.notes]),
            evidence=chosen,
            runner_up=runner_up,
            experiment=chosen.experiment,
            **base,
        )
    deciding = _deciding(chosen, rival)
    rival_share = margin(winners, _ORDER.index(rival.action))
    why = (
        f"{chosen.label} leads ({chosen.rollouts} rollout(s), {chosen.share:.0%} of the "
        f"evidence) but wins only {held:.0%} of {RESAMPLES} resamples of the tasks, "
        f"{rival.label} {rival_share:.0%} ({rival.rollouts} rollout(s), {rival.share:.0%}): "
        "the evidence does not separate them"
        + (f"; the experiment that decides: {deciding.how}" if deciding else "")
    )
    return Decision(
        action=UNDECIDED,
        label=f"undecided between {chosen.label} and {rival.label}",
        why=why,
        evidence=chosen,
        runner_up=rival,
        undecided=[chosen.action, rival.action],
        experiment=deciding,
        **base,
    )
