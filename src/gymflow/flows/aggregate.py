"""The `aggregate` flow: merge shard stores into a run store, then health, profile and report."""

from __future__ import annotations

from dataclasses import replace

from gymflow.flows.eval_run import RunOutcome, analyse_run
from gymflow.flows.lean import flow
from gymflow.steps.shards import aggregate_shards


@flow(name="aggregate", log_prints=True)
def aggregate(run_dir: str, shard_dirs: list[str]) -> RunOutcome:
    """Merge shard stores (idempotent; a shard of another run is refused and nothing is
    written), then analyse the run store and publish its artifacts.

    Args:
        run_dir: The run store to merge into (created if absent).
        shard_dirs: Shard run directories (or .duckdb files); ones with no store are skipped.
    """
    merged = aggregate_shards(run_dir, shard_dirs)
    return replace(analyse_run(run_dir), aggregate=merged)
