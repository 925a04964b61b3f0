"""Each next action as a hypothesis: what it claims, what it predicts the stored rollouts show,
which evidence classes (`gymflow.analysis.evidence`) are the rollouts where that prediction
holds, and the one-factor experiment on the affected tasks that would confirm it.

- verifier repair: "the verifier judges wrong". Predicts rollouts it could not judge, or failed
  answers its own lenient reading passes as the expected answer (`lenient_right`), or passes
  without an answer. Confirmed by judging those rollouts again under the lenient reading: a
  reverify, no model call.
- chat format: "the model does not follow the chat format". Predicts outputs that copy the
  prompt back, write the template's turn markers, or loop its placeholder (`echo`). Confirmed by
  sending the same turns as plain text to the server's completions endpoint
  (`model.chat_template: plain`), so only the template changes.
- harness work: "the serving stack or the harness, not the policy, failed". Predicts failed model
  calls, tools the server ignored, turn limits reached on the way (not while repeating one tool
  call: that is the model's loop), answers cut at the output-token limit on their way to an
  answer (`cut_on_way`: never a loop, an echo or a placeholder), and rollouts an external agent
  lost (`agent_failed`: it crashed, timed out, stopped at its step limit other than in a loop,
  was not installed, or its sandbox failed) or whose model-call record it broke (`unrecorded`).
  Confirmed by raising the limit on the cut tasks, sending `tool_choice: auto` where tools were
  ignored, or running the agent's lost tasks with the same model under gymflow's own
  `tool_loop` agent: they end judged there (installing the agent, or fixing the sandbox, where
  that is what failed).
- prompt change: "the prompt does not get the answer into the form the verifier reads".
  Predicts answers in another form (the expected answer is in the text, the verifier found no
  answer in its form) or outputs that copy the prompt's placeholder. Confirmed by the prompt
  that asks for the form the verifier reads.
- skill improvement: "the policy can do these tasks, not reliably". Predicts wrong answers on
  tasks other repeats pass; it needs repeats above one at a temperature above zero to be seen.
- model training: "the policy cannot do these tasks". Predicts wrong answers on tasks no repeat
  passes. Confirmed (or turned into skill improvement) by more repeats at a temperature above
  zero on those tasks.

A cut answer whose expected answer is in the text but not in the verifier's form
(`cut_other_form`) is the prompt's when the uncut rollouts also miss the form, the limit's when
they hold it, and evidence for both when nothing was left uncut: the margin then says which
experiment decides."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gymflow.analysis.results import Evidence, EvidencePattern, Experiment

ACTIONS: dict[str, str] = {
    "verifier_repair": "verifier repair",
    "chat_format": "check the chat template or use an instruct checkpoint",
    "harness_work": "harness work",
    "prompt_change": "prompt change",
    "skill_improvement": "skill improvement",
    "model_training": "model training",
}


@dataclass(frozen=True, slots=True)
class Hypothesis:
    action: str
    claim: str
    prediction: str


HYPOTHESES: dict[str, Hypothesis] = {
    h.action: h
    for h in (
        Hypothesis(
            "verifier_repair",
            "the verifier judges wrong: fix it before trusting any score",
            "rollouts the verifier could not judge, failed answers its own lenient reading "
            "passes as the expected answer, or passes without an answer",
        ),
        Hypothesis(
            "chat_format",
            "the model does not follow the chat format: check the chat template or use an "
            "instruct checkpoint",
            "outputs that copy the prompt back, write the template's turn markers or loop "
            "its placeholder, instead of answering the turn",
        ),
        Hypothesis(
            "harness_work",
            "the serving stack or the harness failed, not the policy",
            "failed model calls, tool calls whose server failed, tools the server ignored, "
            "turn limits reached while not repeating one tool call, answers cut at the "
            "output-token limit on their way to an answer (not loops, echoes or placeholders), "
            "and rollouts an external agent lost (it crashed, timed out, stopped at its step "
            "limit, was not installed, or its sandbox failed) or whose model-call record it "
            "broke",
        ),
        Hypothesis(
            "prompt_change",
            "the prompt does not get the answer into the form the verifier reads",
            "answers in another form than the verifier reads (the expected answer is in the "
            "text), or outputs that copy the prompt's placeholder",
        ),
        Hypothesis(
            "skill_improvement",
            "the policy can do these tasks, not reliably",
            "wrong answers on tasks other repeats of the same task pass",
        ),
        Hypothesis(
            "model_training",
            "the policy cannot do these tasks: a capability gap",
            "wrong answers on tasks no repeat passes",
        ),
    )
}

#: evidence class -> the action whose prediction it is
_CLASS_ACTION = {
    "unjudged": "verifier_repair",
    "lenient_right": "verifier_repair",
    "passed_unanswered": "verifier_repair",
    "echo": "chat_format",
    "failed_call": "harness_work",
    "agent_failed": "harness_work",
    "unrecorded": "harness_work",
    "tools_ignored": "harness_work",
    "serving": "harness_work",
    "cut_on_way": "harness_work",
    "other_form": "prompt_change",
    "placeholder": "prompt_change",
}
#: what the model itself got wrong: skill or training by the task's bucket
_MODEL_SIDE = ("cut_astray", "loop", "wrong")
#: the evidence that may count for two actions at once (`cut_form_actions`)
AMBIGUOUS = ("cut_other_form",)


def cut_form_actions(evidence: Evidence) -> tuple[str, ...]:
    """Whose evidence a cut answer holding the expected answer outside the verifier's form is:
    the prompt's when the uncut rollouts mostly miss the form too, the limit's when they mostly
    hold it, both when nothing was left uncut."""
    formless, formed = evidence.uncut_formless, evidence.uncut_formed
    if formless + formed == 0:
        return ("harness_work", "prompt_change")
    return ("prompt_change",) if formless >= formed else ("harness_work",)


def can_show_skill(evidence: Evidence) -> bool:
    """Whether the run can tell skill from capability: repeats above one, sampled above 0."""
    return evidence.repeats > 1 and (evidence.temperature is None or evidence.temperature > 0)


def actions_of(name: str, bucket: str, evidence: Evidence) -> tuple[str, ...]:
    """The actions an evidence class supports on a task of `bucket`."""
    if name == "cut_other_form":
        return cut_form_actions(evidence)
    if name in _CLASS_ACTION:
        return (_CLASS_ACTION[name],)
    if name in _MODEL_SIDE:
        if bucket == "sometimes_pass":
            return ("skill_improvement",)
        # `missing`: no rollout of the task was scored, and this one is the model's (stuck in a
        # loop at its step limit): no repeat passed
        if bucket in ("never_pass", "missing"):
            return ("model_training",)
    return ()


def support(pattern: EvidencePattern, evidence: Evidence) -> dict[str, int]:
    """action -> rollouts of one task of `pattern` whose evidence supports it."""
    out = dict.fromkeys(ACTIONS, 0)
    for name, count in pattern.counts.items():
        for action in actions_of(name, pattern.bucket, evidence):
            out[action] += count
    return out


def categories(action: str, evidence: Evidence) -> dict[str, int]:
    """evidence class -> rollouts that support `action`, over the whole run."""
    out: dict[str, int] = {}
    for pattern in evidence.patterns:
        for name, count in pattern.counts.items():
            if action in actions_of(name, pattern.bucket, evidence):
                out[name] = out.get(name, 0) + count * pattern.tasks
    return out


def tasks_of(action: str, evidence: Evidence) -> int:
    return sum(
        p.tasks
        for p in evidence.patterns
        if any(action in actions_of(name, p.bucket, evidence) for name in p.counts)
    )


#: the temperature a rerun samples at when the run sampled at 0 (or left it unset)
WARM = 0.7


def _scaled_limit(limit: int | None) -> int:
    return min(max(4 * (limit or 64), 64), 8192)


def experiment(
    action: str,
    evidence: Evidence,
    task_ids: list[str],
    *,
    verifier: str | None,
    lenient: dict | None,
    template: str | None,
) -> Experiment:
    """The one-factor experiment confirming `action`, on `task_ids` (the tasks its evidence is
    on): what it changes, and what should happen if the hypothesis is right."""
    cats = categories(action, evidence)
    if action == "verifier_repair":
        if lenient is not None and cats.get("lenient_right", 0) + cats.get("other_form", 0):
            return Experiment(
                action=action,
                factor="verifier_params",
                change={"verifier_params": lenient},
                kind="reverify",
                tasks=task_ids,
                predicted="judged again under the verifier's lenient reading, the failed "
                "answers it reads as the expected answer pass: the pass rate on these tasks "
                "rises, with no model call",
                how="gym eval reverify RUN "
                + " ".join(f"--set {k}={v}" for k, v in lenient.items()),
            )
        return Experiment(
            action=action,
            factor="verifier",
            change={},
            kind="none",
            tasks=task_ids,
            predicted="once fixed, the verifier judges every rollout",
            how=f"read the verifier errors (`gym eval health RUN`); fix {verifier or 'it'}, "
            "then `gym eval reverify RUN`",
        )
    if action == "harness_work":
        cut = cats.get("cut_on_way", 0) + cats.get("cut_other_form", 0)
        ignored = cats.get("tools_ignored", 0)
        agent = cats.get("agent_failed", 0) + cats.get("unrecorded", 0)
        serving = cats.get("failed_call", 0) + cats.get("serving", 0)
        if agent and agent >= max(cut, ignored, serving):
            return _agent_experiment(evidence, task_ids)
        if cut >= ignored and cut >= cats.get("failed_call", 0) + cats.get("serving", 0):
            limit = _scaled_limit(evidence.max_output_tokens)
            return Experiment(
                action=action,
                factor="sampling.max_output_tokens",
                change={"sampling": {"max_output_tokens": limit}},
                kind="rerun",
                tasks=task_ids,
                predicted=f"with the limit raised to {limit}, the cut answers finish: fewer "
                "are cut and the pass rate on these tasks rises",
                how=f"rerun these tasks with sampling.max_output_tokens: {limit}",
            )
        if ignored:
            return Experiment(
                action=action,
                factor="model.tool_choice",
                change={"model": {"tool_choice": "auto"}},
                kind="rerun",
                tasks=task_ids,
                predicted="with tool_choice sent, the server passes the tools on: the model "
                "calls them and the pass rate on these tasks rises",
                how="rerun these tasks with model.tool_choice: auto (or fix the server's "
                "function-calling handler)",
            )
        return Experiment(
            action=action,
            factor="serving",
            change={},
            kind="none",
            tasks=task_ids,
            predicted="once the failures are fixed, these rollouts complete",
            how="read the failures (`gym eval health RUN`), fix the server or harness, then "
            "`gym eval run CONFIG --resume`",
        )
    if action == "chat_format":
        # the same server and weights, the conversation rendered by gymflow as plain text (what a
        # base checkpoint was trained on) and sent to /v1/completions: only the template changes
        return Experiment(
            action=action,
            factor="model.chat_template",
            change={"model": {"kind": "completions", "chat_template": "plain"}},
            kind="rerun",
            tasks=task_ids,
            predicted="sent the turns as plain text instead of the server's chat template, the "
            "outputs answer instead of copying the prompt: the pass rate on these tasks rises",
            how="rerun these tasks with model.kind: completions and model.chat_template: plain "
            "(or the checkpoint's own template: chatml, gemma, alpaca), or use an instruct "
            "checkpoint",
        )
    if action == "prompt_change":
        changed = answer_form_template(template)
        if changed is not None:
            return Experiment(
                action=action,
                factor="prompt_template",
                change={"prompt_template": changed},
                kind="rerun",
                tasks=task_ids,
                predicted="asked for the answer in the form the verifier reads, the answers "
                "are read: the pass rate on these tasks rises",
                how="rerun these tasks with prompt_template asking for a final 'Answer:' line",
            )
        return Experiment(
            action=action,
            factor="prompt_template",
            change={},
            kind="none",
            tasks=task_ids,
            predicted="asked for the answer in the form the verifier reads, the answers are "
            "read: the pass rate on these tasks rises",
            how="rewrite the prompt to ask for the form the verifier reads, and rerun these tasks",
        )
    temperature = evidence.temperature or WARM
    repeats = min(max(4, 4 * evidence.repeats), 16)
    return Experiment(
        action=action,
        factor="repeats",
        change={"repeats": repeats, "sampling": {"temperature": temperature}},
        kind="rerun",
        tasks=task_ids,
        predicted=f"sampled {repeats} times at temperature {temperature:g}, "
        + (
            "these tasks still never pass (a capability gap), where skill improvement "
            "predicts some pass on some repeats"
            if action == "model_training"
            else "these tasks pass on some repeats and fail on others"
        ),
        how=f"rerun these tasks with repeats: {repeats} at temperature {temperature:g}",
    )


#: gymflow's own agent over a shell tool: the harness a lost task is run under to confirm that
#: the agent, not the model, lost it
OWN_AGENT = "tool_loop"
#: the factors of the experiments confirming that an external agent lost rollouts
AGENT_FACTORS = ("harness", "harness.agent")


def _agent_experiment(evidence: Evidence, task_ids: list[str]) -> Experiment:
    """Run the tasks an external agent lost with the same model under gymflow's own agent: if
    the agent lost them, they end judged there. Where the run's agent is that one already, or
    it was not installed or its sandbox failed, gymflow names the fix instead."""
    kinds = evidence.agent_kinds
    setup = kinds.get("agent_install_missing", 0) + kinds.get("sandbox_error", 0)
    if evidence.agent == OWN_AGENT or setup * 2 > sum(kinds.values()):
        return Experiment(
            action="harness_work",
            factor=AGENT_FACTORS[0],
            change={},
            kind="none",
            tasks=task_ids,
            predicted="once the agent runs (installed, its sandbox starting) and its calls are "
            "recorded, these rollouts end judged",
            how="read the agent's failures (`gym eval health RUN`, the rollouts' errors); fix "
            "its install (.ci/run), sandbox or recipe, then `gym eval run CONFIG --resume`",
        )
    return Experiment(
        action="harness_work",
        factor=AGENT_FACTORS[1],
        # the run's own command line (`harness.command`) and its version give way to the agent
        change={"harness": {"agent": OWN_AGENT, "command": None, "agent_version": None}},
        kind="rerun",
        tasks=task_ids,
        predicted=f"with the same model under gymflow's own `{OWN_AGENT}` agent, these tasks "
        "end judged (no agent failure, every call recorded): the agent lost them, not the "
        "model; a task that passes there is one the model can solve",
        how=f"rerun these tasks with harness.agent: {OWN_AGENT}",
        measure="judged_share",
    )


_PLACEHOLDER = re.compile(r"<[A-Za-z][A-Za-z0-9 _-]{0,30}>")


def answer_form_template(template: str | None) -> str | None:
    """The run's prompt template asking for a final 'Answer:' line in words, its placeholders
    (`<city>`) written out so there is nothing to copy; None without a template."""
    if not template:
        return None
    spelled = _PLACEHOLDER.sub(lambda m: f"your {m.group(0)[1:-1].strip()}", template)
    return (
        f"{spelled.rstrip()}\n\nEnd with one line that starts with 'Answer:' followed by your "
        "answer and nothing else."
    )
