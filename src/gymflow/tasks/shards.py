"""Prefect tasks around shard stores: how far a shard is, and merging shards into the run store."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from gymflow.config import EvalConfig
from gymflow.rollouts.plan import RunPlan
from gymflow.store.db import store_path
from gymflow.store.merge import ShardProgress, merge_shards, shard_progress


def shard_plan(plan: RunPlan, config: EvalConfig) -> RunPlan:
    """The run's plan narrowed to one shard, without resolving the config again."""
    return replace(plan, config=config)


def progress_of(plan: RunPlan, config: EvalConfig) -> ShardProgress:
    return shard_progress(shard_plan(plan, config))


@task(name="aggregate-shards", cache_policy=NO_CACHE)
def aggregate_shards(run_dir: str, shard_dirs: list[str]) -> dict[str, Any]:
    """Merge every shard store that exists into the run store; report what is still missing."""
    present = [path for path in shard_dirs if store_path(path).exists()]
    if not present:
        return {"merged": [], "missing_count": None, "note": "no shard store exists yet"}
    return merge_shards(run_dir, present).as_dict()


def progress_dict(progress: ShardProgress) -> dict[str, Any]:
    return {**asdict(progress), "complete": progress.complete}
