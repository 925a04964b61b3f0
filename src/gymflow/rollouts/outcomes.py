"""The typed outcomes of collecting a run: each batch task's and each shard's (the whole run's,
with its analysis, is `gymflow.flows.eval_run.RunOutcome`). The store says what is done; these
say what one attempt at it did, for the CLI, the run log and the tests."""

from __future__ import annotations

from dataclasses import dataclass

from gymflow.store.merge import ShardProgress


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One batch task: `skipped` keys its store held already, `attempted` rollouts run, of
    which `completed` and `failed`."""

    skipped: int
    attempted: int
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class ShardOutcome:
    """One shard as the run that fanned it out saw it: what its store holds afterwards, whether
    it ran at all (not when its store was complete already), and its batches (a shard run here)
    or its flow run's id (a shard run on a work pool)."""

    progress: ShardProgress
    ran: bool
    batches: tuple[BatchOutcome, ...] = ()
    flow_run: str | None = None
