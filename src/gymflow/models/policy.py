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


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) from the hash of `parts`."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def prompt_key(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def task_skill(skill_seed: int, task_id: str) -> float:
    """About a third of tasks always solved, a fifth never, the rest sometimes (skill 0.15-0.85)."""
    u = _unit("skill", skill_seed, task_id)
    if u < 0.35:
        return 1.0
    if u < 0.55:
        return 0.0
    return 0.15 + 0.7 * _unit("level", skill_seed, task_id)


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    task_id: str
    reference: str
    distractor: str
    reference_actions: list[list[dict[str, Any]]]
    skill: float


def build_table(tasks: list[Task], prompts: list[str], skill_seed: int) -> dict[str, PolicyEntry]:
    table: dict[str, PolicyEntry] = {}
    for task, prompt in zip(tasks, prompts, strict=True):
        actions = [
            [{"name": c.name, "arguments": c.arguments} for c in turn]
            for turn in task.reference_actions
        ]
        table[prompt_key(prompt)] = PolicyEntry(
            task.task_id,
            task.reference,
            task.distractor,
            actions,
            task_skill(skill_seed, task.task_id),
        )
    return table


def save_table(table: dict[str, PolicyEntry], path: Path) -> None:
    path.write_text(json.dumps({key: asdict(entry) for key, entry in table.items()}))


def load_table(path: Path) -> dict[str, PolicyEntry]:
    return {key: PolicyEntry(**row) for key, row in json.loads(path.read_text()).items()}


def decide(entry: PolicyEntry, *, server_seed: int, request_seed: object, turn: int) -> bool:
    """Whether this sample is a correct one."""
    return _unit("answer", server_seed, request_seed, entry.task_id, turn) < entry.skill
