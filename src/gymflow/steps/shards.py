"""Prefect tasks around shard stores: how far a shard is, and merging shards into the run store."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from gymflow.core.config import EvalConfig
from gymflow.rollouts.collect import RESUMABLE_KINDS
from gymflow.rollouts.merge import merge_shards, shard_progress
from gymflow.rollouts.plan import RunPlan
from gymflow.rollouts.published import fetched
from gymflow.store.db import connect, store_path
from gymflow.store.merge import MergeReport, ShardProgress
from gymflow.store.runs import has_run, run_info
from gymflow.store.superseded import supersede_failed


def progress_of(plan: RunPlan, config: EvalConfig) -> ShardProgress:
    return shard_progress(plan.for_shard(config))


@task(name="aggregate-shards", cache_policy=NO_CACHE)
def aggregate_shards(
    run_dir: str,
    shard_dirs: list[str],
    plan: RunPlan | None = None,
    *,
    checkpoints: bool = False,
) -> MergeReport | None:
    """Merge every shard store that exists (a published shard's committed result, or with
    `checkpoints` what its checkpoints hold) into the run store; report what is still missing
    (None: no shard store exists yet, nothing was merged). `plan`: the run's, with its shard
    count, from the flow that ran the shards; unset, resolved from what the shards stored."""
    with fetched(shard_dirs, checkpoints=checkpoints) as present:
        return merge_shards(run_dir, present, plan) if present else None


@task(name="supersede-failed", cache_policy=NO_CACHE)
def supersede_failed_in_shards(run_dir: str, shard_dirs: list[str]) -> None:
    """Before a sharded resume: set aside the transiently failed rollouts in every shard store
    and in the run store, so the shards run them again and the merge takes the new attempts
    (the run store keeps its own copy of the failed ones as evidence)."""
    for path in [*shard_dirs, run_dir]:
        if store_path(path).exists():
            with connect(path) as con:
                if has_run(con):
                    supersede_failed(con, run_info(con).run_id, RESUMABLE_KINDS)
