"""A task: one dataset row, what every layer passes around (prompt, policy, verifier, store)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a task's reference or distractor plan: the tool and its arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Task:
    """One dataset row.

    `inputs` feed the prompt template; `data` is what the verifier reads (answers, tests, expected
    state). `reference` is a response a perfect policy gives and `distractor` a plausible wrong one:
    the local policy server plays from them. `reference_actions` is the tool-call plan, one tuple of
    (possibly parallel) calls per turn, for environments with tools; `distractor_actions` is the
    plan a policy that gets the task wrong follows (wrong tool, wrong arguments, stopping early).
    `input_items` and `tools`, when a row brings its own request (NeMo Gym's
    `responses_create_params`), open the rollout instead of the rendered prompt and are the tools
    offered."""

    task_id: str
    inputs: dict[str, Any]
    data: dict[str, Any]
    reference: str
    distractor: str
    reference_actions: tuple[tuple[ToolCall, ...], ...] = ()
    distractor_actions: tuple[tuple[ToolCall, ...], ...] = ()
    tags: tuple[str, ...] = ()
    difficulty: str | None = None
    input_items: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
