"""The simulated policy: which answer the local policy server gives to which prompt.

Pure and deterministic. A policy table maps a prompt (the text of the first user message) to the
task's reference and distractor responses and a per-task skill; the draw for a request depends on
the server seed, the request's seed and the task, never on arrival order."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gymflow.environments.base import Task


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


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    task_id: str
    reference: str
    distractor: str
    reference_actions: Plan
    distractor_actions: Plan
    skill: float

    def turn(self, *, correct: bool, turn: int) -> list[dict[str, Any]] | str:
        """The calls to make at `turn`, or the final text once the plan is played out."""
        plan = self.reference_actions if correct else self.distractor_actions
        if turn < len(plan) and plan[turn]:
            return plan[turn]
        return self.reference if correct else self.distractor


def _plan(turns: tuple) -> Plan:
    return [[{"name": c.name, "arguments": c.arguments} for c in group] for group in turns]


def build_table(tasks: list[Task], prompts: list[str], skill_seed: int) -> dict[str, PolicyEntry]:
    table: dict[str, PolicyEntry] = {}
    for task, prompt in zip(tasks, prompts, strict=True):
        table[prompt_key(prompt)] = PolicyEntry(
            task.task_id,
            task.reference,
            task.distractor,
            _plan(task.reference_actions),
            _plan(task.distractor_actions),
            task_skill(skill_seed, task.task_id),
        )
    return table


def turns_taken(items: list[dict[str, Any]]) -> int:
    """How many tool-calling turns the conversation already holds (runs of function_call items)."""
    turns, previous = 0, None
    for item in items:
        kind = item.get("type")
        if kind == "function_call" and previous != "function_call":
            turns += 1
        previous = kind
    return turns


def save_table(table: dict[str, PolicyEntry], path: Path) -> None:
    path.write_text(json.dumps({key: asdict(entry) for key, entry in table.items()}))


def load_table(path: Path) -> dict[str, PolicyEntry]:
    return {key: PolicyEntry(**row) for key, row in json.loads(path.read_text()).items()}


def decide(entry: PolicyEntry, *, server_seed: int, request_seed: object) -> bool:
    """Whether this rollout is a correct one; decided once, so every turn follows the same plan."""
    return unit_draw("answer", server_seed, request_seed, entry.task_id) < entry.skill
