"""From a run's results to one recommended next action, by fixed rules: the one function the
Prefect artifacts, the report, the flow's log and the CLI all read.

The run first: an incomplete run (rollouts missing) is completed before anything else, then an
unhealthy one (an integrity check beyond its threshold) has its health fixed: the scores of
either mislead. Otherwise the diagnosis decides. Each non-passing rollout is evidence for one
action:
- verifier repair: verifier errors, unverified rollouts, and verifier suspects (right answer
  failed, pass without an answer);
- harness work: model-call failures (rate limits, timeouts, server errors), harness errors,
  crashed tools, max turns, malformed tool calls, tools offered and ignored by the server, and
  truncated outputs where the limit cost answers: on tasks other repeats pass, or when at least
  TRUNCATED_SHARE of the stored rollouts were cut (the limit then shapes the run);
- prompt change: answers in another form: the verifier found no answer in the form it reads,
  yet the expected answer appears elsewhere in the text (a reading in another form would pass
  it). No answer in the expected form and the expected answer nowhere is not a prompt problem:
  it counts as a wrong answer;
- skill improvement: wrong answers (and tool misuse, missing answers, truncated rambling) on
  sometimes-pass tasks: the policy can solve them, not reliably;
- model training: the same on never-pass tasks: a capability gap.

The rules: measurement first. Verifier repair wins when its share of the evidence reaches 5%,
then harness work at 10%: until those are fixed the other numbers are distorted. Otherwise the
action with the largest share wins, ties going to the cheaper action (prompt change, skill
improvement, model training). The runner-up is the next action by share. Shares are over all
non-passing rollouts plus suspect passes."""

from __future__ import annotations

from typing import Any

from gymflow.analysis.results import (
    Candidate,
    Decision,
    Diagnosis,
    FailureRow,
    Health,
    Profile,
)

#: what comes before the evidence: scores of an incomplete or unhealthy run mislead
COMPLETE_RUN, FIX_HEALTH = "complete_run", "fix_health"
LABELS: dict[str, str] = {COMPLETE_RUN: "complete the run", FIX_HEALTH: "fix health first"}

ACTIONS: dict[str, str] = {
    "verifier_repair": "verifier repair",
    "harness_work": "harness work",
    "prompt_change": "prompt change",
    "skill_improvement": "skill improvement",
    "model_training": "model training",
}

#: blocking actions and the share of evidence at which they win outright, in priority order
BLOCKING = (("verifier_repair", 0.05), ("harness_work", 0.10))

_HARNESS = {
    "model_failure",
    "harness_error",
    "tools_not_called",
    "harness_max_turns",
    "harness_malformed_tool_call",
}
_MODEL_SIDE = {"wrong_answer", "tool_error", "no_answer", "truncated"}

#: Truncated rollouts are harness evidence on any task once at least this share of the stored
#: rollouts was cut at the output-token limit: the limit then shapes what the run measures.
#: Below it, only on tasks other repeats pass (the limit cut an answer the policy can give); a
#: rambling answer cut on a task the policy never solves is the policy's.
TRUNCATED_SHARE = 0.25

_WHY = {
    "verifier_repair": "the verifier fails to judge, or judges visibly wrong, on {share} of the "
    "evidence: fix it before trusting any score",
    "harness_work": "{share} of the evidence is the harness or serving stack failing (model "
    "calls, tools, turn or token limits), not the policy",
    "prompt_change": "{share} of the evidence is answers in another form than the verifier "
    "reads: the prompt does not get the answer into the form the verifier reads",
    "skill_improvement": "{share} of the evidence is wrong answers on tasks the policy solves "
    "sometimes: it can do them, not reliably",
    "model_training": "{share} of the evidence is wrong answers on tasks the policy never "
    "solves: a capability gap",
}


def _action_of(row: FailureRow, *, limit_shapes_run: bool) -> str | None:
    category = row.category
    if category in ("verifier_error", "unverified"):
        return "verifier_repair"
    if category in _HARNESS or (category == "tool_error" and row.kind == "tool_error"):
        return "harness_work"
    if category == "truncated" and (limit_shapes_run or row.bucket == "sometimes_pass"):
        return "harness_work"
    if category == "answer_in_other_form":
        return "prompt_change"
    if category in _MODEL_SIDE:
        if row.bucket == "sometimes_pass":
            return "skill_improvement"
        if row.bucket == "never_pass":
            return "model_training"
    return None


def decide(health: Health, profile: Profile, diagnosis: Diagnosis) -> Decision:
    """The recommended next action: complete the run, then fix its records, then what the
    diagnosis's evidence points to (`recommend`). When the run comes first, the evidence's own
    pick is kept as the runner-up: what to do once the run is complete and healthy."""
    recommended = recommend(diagnosis)
    missing, expected = profile.coverage.missing, profile.coverage.expected
    if missing:
        why = (
            f"{missing} of the {expected} expected rollouts are missing, so the scores describe "
            "part of the run: resume it (retry the flow run, or `gym eval run --resume`) before "
            "reading them"
        )
        return _first(COMPLETE_RUN, why, recommended)
    if health.verdict != "healthy":
        why = (
            f"health checks fail beyond their thresholds ({', '.join(health.broken)}): until "
            "they pass, the scores cannot be trusted (see `gym eval health`)"
        )
        return _first(FIX_HEALTH, why, recommended)
    return recommended


def _first(action: str, why: str, recommended: Decision) -> Decision:
    return recommended.model_copy(
        update={
            "action": action,
            "label": LABELS[action],
            "why": why,
            "evidence": None,
            "runner_up": recommended.evidence,
        }
    )


def recommend(diagnosis: Diagnosis) -> Decision:
    """The action the diagnosis's evidence points to, by the rules above: `action` is None only
    when there is no evidence at all (every stored rollout passed)."""
    candidates: dict[str, dict[str, Any]] = {
        key: {
            "action": key,
            "label": label,
            "rollouts": 0,
            "share": 0.0,
            "threshold": dict(BLOCKING).get(key),
            "fired": False,
            "categories": {},
            "examples": [],
            "notes": [],
        }
        for key, label in ACTIONS.items()
    }
    rows = diagnosis.failures_by_bucket
    truncated = sum(row.rollouts for row in rows if row.category == "truncated")
    limit_shapes_run = truncated >= TRUNCATED_SHARE * max(diagnosis.rollouts, 1)
    for row in rows:
        action = _action_of(row, limit_shapes_run=limit_shapes_run)
        if action is None:
            continue
        entry = candidates[action]
        entry["rollouts"] += row.rollouts
        entry["categories"][row.category] = entry["categories"].get(row.category, 0) + row.rollouts
        entry["examples"].extend(row.examples[: 5 - len(entry["examples"])])
    for suspect in diagnosis.verifier_suspects:
        if suspect.kind.startswith("versions_disagree"):
            continue  # expected after a deliberate reverify; shown, not weighed
        entry = candidates["verifier_repair"]
        entry["rollouts"] += suspect.count
        entry["categories"][suspect.kind] = suspect.count
        entry["examples"].extend(suspect.examples[: 5 - len(entry["examples"])])
    total = sum(entry["rollouts"] for entry in candidates.values())
    for entry in candidates.values():
        entry["share"] = entry["rollouts"] / total if total else 0.0
        threshold = entry["threshold"]
        entry["fired"] = entry["rollouts"] > 0 and (
            threshold is None or entry["share"] >= threshold
        )
    for key, notes in _notes(diagnosis, limit_shapes_run, truncated).items():
        candidates[key]["notes"] = notes
    typed = {key: Candidate.model_validate(entry) for key, entry in candidates.items()}
    order = list(ACTIONS)
    ranked = sorted(
        (e for e in typed.values() if e.rollouts > 0),
        key=lambda e: (-e.share, order.index(e.action)),
    )
    if not ranked:
        return Decision(
            action=None,
            label=None,
            why="no evidence: every stored rollout passed and no verifier suspect was found",
            evidence=None,
            runner_up=None,
            candidates=list(typed.values()),
            rules=__doc__ or "",
        )
    blocking = [typed[key] for key, _ in BLOCKING if typed[key].fired]
    chosen = blocking[0] if blocking else ranked[0]
    runner_up = next((e for e in ranked if e is not chosen), None)
    why = _WHY[chosen.action].format(share=f"{chosen.share:.0%}")
    return Decision(
        action=chosen.action,
        label=chosen.label,
        why="; ".join([why, *chosen.notes]),
        evidence=chosen,
        runner_up=runner_up,
        candidates=list(typed.values()),
        rules=__doc__ or "",
    )


def _notes(diagnosis: Diagnosis, limit_shapes_run: bool, truncated: int) -> dict[str, list[str]]:
    """What each action's evidence is, in words, where a category was weighed rather than
    counted: answers without the expected form, truncated rollouts, tools ignored."""
    rows = diagnosis.failures_by_bucket
    other_form = sum(r.rollouts for r in rows if r.category == "answer_in_other_form")
    absent = sum(r.rollouts for r in rows if r.category == "no_answer")
    ignored = sum(r.rollouts for r in rows if r.category == "tools_not_called")
    notes: dict[str, list[str]] = {}
    if other_form or absent:
        read = (
            f"{other_form} of the {other_form + absent} answers the verifier found no answer "
            "in (in the form it reads) hold the expected answer elsewhere in their text"
        )
        notes.setdefault("prompt_change", []).append(
            f"{read}: a reading in another form would pass them"
        )
        if absent:
            notes.setdefault(_model_side(rows, "no_answer"), []).append(
                f"{read}; the other {absent} hold it nowhere, so no reading of them would "
                "pass: counted as wrong answers, not as a prompt problem"
            )
    if truncated:
        share = truncated / max(diagnosis.rollouts, 1)
        cut = (
            f"{truncated} rollout(s) ({share:.0%} of those stored) ended at the output-token limit"
        )
        if limit_shapes_run:
            notes.setdefault("harness_work", []).append(
                f"{cut}: at least {TRUNCATED_SHARE:.0%}, so the limit shapes the run"
            )
        else:
            on_varying = sum(
                r.rollouts
                for r in rows
                if r.category == "truncated" and r.bucket == "sometimes_pass"
            )
            if on_varying:
                notes.setdefault("harness_work", []).append(
                    f"{cut}; {on_varying} on tasks other repeats pass: the limit cost answers"
                )
            if truncated - on_varying:
                notes.setdefault(_model_side(rows, "truncated"), []).append(
                    f"{cut}; {truncated - on_varying} on tasks no repeat passes, under "
                    f"{TRUNCATED_SHARE:.0%} of the run: the policy's rambling, not the limit"
                )
    for suspect in diagnosis.verifier_suspects:
        if not suspect.kind.startswith("versions_disagree"):
            notes.setdefault("verifier_repair", []).append(
                f"{suspect.count} rollout(s): {suspect.description}"
            )
    if ignored:
        notes.setdefault("harness_work", []).append(
            f"{ignored} rollout(s) were offered tools the model server ignored (almost no "
            "rollout of the run called one): check its function-calling setup and tool_choice"
        )
    return notes


def _model_side(rows: list[FailureRow], category: str) -> str:
    """The model-side action most of `category`'s rollouts count for."""
    varying = sum(
        r.rollouts for r in rows if r.category == category and r.bucket == "sometimes_pass"
    )
    never = sum(r.rollouts for r in rows if r.category == category and r.bucket == "never_pass")
    return "skill_improvement" if varying > never else "model_training"
