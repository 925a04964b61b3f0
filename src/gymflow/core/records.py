"""The records a rollout produces: the harness fills these dataclasses, the store writes them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def rollout_id(run_id: str, task_id: str, repeat_index: int) -> str:
    """Deterministic, so shard merges and resumes agree on identity without coordination."""
    digest = hashlib.blake2b(f"{run_id}\x1f{task_id}\x1f{repeat_index}".encode(), digest_size=10)
    return digest.hexdigest()


def rollout_seed(run_seed: int, task_id: str, repeat_index: int) -> int:
    digest = hashlib.blake2b(f"{run_seed}\x1f{task_id}\x1f{repeat_index}".encode(), digest_size=6)
    return int.from_bytes(digest.digest(), "big")


@dataclass(slots=True)
class ModelCall:
    """One HTTP attempt at one model request: the evidence the health check reads."""

    call_index: int
    attempt: int
    status: str  # completed | incomplete | error
    failure_kind: str | None
    http_status: int | None
    latency_s: float | None  # None: not measured (an imported file keeps no latency)
    request: dict[str, Any]
    response: Any  # parsed JSON, or the raw text of a malformed body
    sampling: dict[str, Any]
    input_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    error: str | None = None


@dataclass(slots=True)
class Verification:
    verifier_version: str
    status: str  # ok | error
    reward: float | None
    passed: bool | None
    failure_kind: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Rollout:
    rollout_id: str
    run_id: str
    task_id: str
    repeat_index: int
    seed: int
    status: str
    started_at: datetime
    finished_at: datetime
    trajectory: list[dict[str, Any]]
    calls: list[ModelCall]
    output_text: str = ""
    failure_kind: str | None = None
    error: str | None = None
    incomplete: bool = False
    num_turns: int = 0
    verification: Verification | None = None
    #: Harness counters (tool calls, malformed calls, max_turns_reached, ...) for health checks.
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def input_tokens(self) -> int:
        return sum(call.input_tokens or 0 for call in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(call.output_tokens or 0 for call in self.calls)
