"""The simulated policy: which answer the local policy server gives to which prompt.

Pure and deterministic. A policy table maps a prompt (the text of the first user message) to the
task's reference and distractor responses and a per-task skill; the draw for a request depends on
the server seed, the request's seed and the task, never on arrival order."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gymflow.core.tasks import Task
from gymflow.core.written import write_text


def unit_draw(*parts: object) -> float:
    """A uniform number in [0, 1) from the hash of `parts`."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def prompt_key(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def task_skill(skill_seed: int, task_id: str) -> float:
    """About a third of tasks always solved, a fifth never, the rest sometimes (skill 0.15-0.85)."""
    u = unit_draw("skill", skill_seed, task_id)
    if u < 0.35:
        return 1.0
    if u < 0.55:
        return 0.0
    return 0.15 + 0.7 * unit_draw("level", skill_seed, task_id)


Plan = list[list[dict[str, Any]]]  # turns of (parallel) calls: {"name": ..., "arguments": {...}}

#: How a wrong rollout goes wrong when the task brings no distractor plan of its own.
MISTAKES = ("wrong_tool", "wrong_arguments", "early_stop")
#: Chance per turn of a malformed call (broken JSON or a wrong type) at skill 0; none at skill 1.
MALFORMED_RATE = 0.3


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    task_id: str
    reference: str
    distractor: str
    reference_actions: Plan
    distractor_actions: Plan
    skill: float

    def turn(self, *, correct: bool, turn: int) -> list[dict[str, Any]] | str:
        """The calls a plain plan makes at `turn`, or the final text once it is played out."""
        plan = self.reference_actions if correct else self.distractor_actions
        if turn < len(plan) and plan[turn]:
            return plan[turn]
        return self.reference if correct else self.distractor

    def step(
        self, items: list[dict[str, Any]], *, correct: bool, tools: list[str], draw: Draw
    ) -> list[dict[str, Any]] | str:
        """What the policy does next in the conversation `items`.

        A correct rollout plays the reference plan; a wrong one plays the task's distractor plan,
        or, when the task has none, a mistake of the reference plan chosen by `draw` (a wrong tool,
        wrong arguments, or stopping early). Either may make a malformed call, more often the lower
        the skill, and then makes that call again properly once told it was malformed."""
        position, broken = plan_position(
            items, self.reference_actions if correct else self.distractor_actions
        )
        if correct or self.distractor_actions or not self.reference_actions:
            step = self.turn(correct=correct, turn=position)
        else:
            step = self._mistake(position, tools, draw)
        if isinstance(step, str):
            return step
        if broken:
            return [call for i, call in enumerate(step) if i in broken] or step
        if draw("malformed", position) < MALFORMED_RATE * (1.0 - self.skill):
            return _malformed(step, draw("how", position))
        return step

    def _mistake(self, position: int, tools: list[str], draw: Draw) -> list[dict[str, Any]] | str:
        plan = self.reference_actions
        kind = MISTAKES[int(draw("mistake") * len(MISTAKES))]
        at = int(draw("mistake_turn") * len(plan))
        if position >= len(plan) or (kind == "early_stop" and position >= at):
            return self.distractor
        calls = [dict(call) for call in plan[position]]
        if position == at:
            others = [name for name in tools if name != calls[0]["name"]]
            if kind == "wrong_tool" and others:
                calls[0]["name"] = others[int(draw("tool") * len(others))]
            else:
                calls[0]["arguments"] = _perturbed(calls[0]["arguments"])
        return calls


Draw = Callable[..., float]


def plan_position(items: list[dict[str, Any]], plan: Plan) -> tuple[int, list[int]]:
    """(plan turns already played, the indices of the last turn's malformed calls to repeat).

    A turn with an accidental malformed call does not count as played: the next turn repeats
    those calls. Raw argument text the plan itself carries is deliberate and is not repeated."""
    played, broken = 0, []
    for group in call_turns(items):
        broken = [i for i, call in enumerate(group) if not _parses(call.get("arguments"))]
        planned = plan[played] if played < len(plan) else []
        if all(i < len(planned) and isinstance(planned[i]["arguments"], str) for i in broken):
            played, broken = played + 1, []
    return played, broken


def call_turns(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The function calls in `items`, grouped by the turn that made them."""
    turns: list[list[dict[str, Any]]] = []
    previous = None
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            if previous != "function_call":
                turns.append([])
            turns[-1].append(item)
        if kind != "reasoning":  # a reasoning item sits inside a turn, not between two
            previous = kind
    return turns


def _parses(arguments: object) -> bool:
    try:
        return isinstance(json.loads(arguments), dict) if isinstance(arguments, str) else True
    except json.JSONDecodeError:
        return False


def _malformed(calls: list[dict[str, Any]], how: float) -> list[dict[str, Any]]:
    """The same turn with its first call broken: cut-off JSON, or a number sent as text."""
    broken = [dict(call) for call in calls]
    arguments = broken[0]["arguments"]
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    if how < 0.5 or not isinstance(arguments, dict) or not arguments:
        broken[0]["arguments"] = text[: max(1, len(text) - 1)]
    else:
        key = next(iter(arguments))
        broken[0]["arguments"] = json.dumps({**arguments, key: [arguments[key]]})
    return broken


def _perturbed(arguments: Any) -> Any:
    """Plausible but wrong arguments: the first value nudged."""
    if not isinstance(arguments, dict) or not arguments:
        return arguments
    key, value = next(iter(arguments.items()))
    if isinstance(value, bool):
        wrong: Any = not value
    elif isinstance(value, int | float):
        wrong = value + 1
    elif isinstance(value, str):
        wrong = value + "_x" if value else "x"
    else:
        wrong = None
    return {**arguments, key: wrong}


def _plan(turns: tuple) -> Plan:
    return [[{"name": c.name, "arguments": c.arguments} for c in group] for group in turns]


def cannot_answer(task_id: str) -> str:
    """The reply to a task that brings nothing to answer from (a dataset row without an answer
    this simulation can write): said plainly, so nobody mistakes it for a model's attempt."""
    return (
        f"I am gymflow's simulated policy. Task {task_id} carries no reference answer, so I "
        "cannot simulate one; use a real model, or map a passing response to "
        "dataset.fields.reference."
    )


def wrong_answer(task_id: str) -> str:
    return f"I am gymflow's simulated policy, giving a deliberately wrong answer to {task_id}."


def _answers(task: Task) -> tuple[str, str]:
    """(reference, distractor), with plain statements where a task without a tool plan has
    none: a simulation never sends an empty answer that looks like a model's failure."""
    if task.reference_actions or task.distractor_actions:
        return task.reference, task.distractor
    reference = task.reference or cannot_answer(task.task_id)
    distractor = task.distractor or (
        wrong_answer(task.task_id) if task.reference else cannot_answer(task.task_id)
    )
    return reference, distractor


def build_table(tasks: list[Task], prompts: list[str], skill_seed: int) -> dict[str, PolicyEntry]:
    table: dict[str, PolicyEntry] = {}
    for task, prompt in zip(tasks, prompts, strict=True):
        table[prompt_key(prompt)] = PolicyEntry(
            task.task_id,
            *_answers(task),
            _plan(task.reference_actions),
            _plan(task.distractor_actions),
            task_skill(skill_seed, task.task_id),
        )
    return table


def save_table(table: dict[str, PolicyEntry], path: Path) -> None:
    write_text(path, json.dumps({key: asdict(entry) for key, entry in table.items()}))


def load_table(path: Path) -> dict[str, PolicyEntry]:
    return {key: PolicyEntry(**row) for key, row in json.loads(path.read_text()).items()}


def decide(
    entry: PolicyEntry, *, server_seed: int, request_seed: object, skill: float | None = None
) -> bool:
    """Whether this rollout is a correct one; decided once, so every turn follows the same plan.
    `skill` replaces the task's own (a behaviour set on purpose: `SimulatedBehaviour`)."""
    chance = entry.skill if skill is None else skill
    return unit_draw("answer", server_seed, request_seed, entry.task_id) < chance


# -- behaviours broken on purpose (gymflow.core.config.SimulatedBehaviour) ------------------------
_ANSWER_LINE = re.compile(r"^[ \t]*answer[ \t]*[:=][ \t]*(.+?)[ \t]*$", re.I | re.M)
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
#: What a rambling answer repeats until the output-token limit cuts it.
RAMBLE = "Let me go over the question once more before answering. "


def said_in_prose(text: str) -> str:
    """The answer said in a sentence instead of the form the task asks for: an `Answer: X` line
    becomes "The answer is X.", a `\\boxed{X}` its bare content."""
    text = _ANSWER_LINE.sub(lambda m: f"The answer is {m.group(1)}.", text)
    return _BOXED.sub(lambda m: m.group(1), text)


def rambling(text: str, max_output_tokens: int | None) -> str:
    """`text` behind a sentence repeated until well past the output-token limit, so the limit
    cuts it before the answer (about 4 characters a token, as the server counts them)."""
    limit = int(max_output_tokens or 500) * 4
    return RAMBLE * (2 * limit // len(RAMBLE) + 1) + text


def without_tools(entry: PolicyEntry, calls: list[dict[str, Any]], *, correct: bool) -> str:
    """The answer of a model whose server dropped the offered tools: the task's final text, or
    when it has none (the calls were the answer) the calls written out in words."""
    final = entry.reference if correct else entry.distractor
    if final.strip():
        return final
    written = "; ".join(f"{call['name']}({json.dumps(call['arguments'])})" for call in calls)
    return f"I would call {written}."
