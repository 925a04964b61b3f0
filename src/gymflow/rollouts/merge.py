"""Merging a run's shard stores: the run's plan, resolved from the config the shards stored,
says which tasks and rollouts the run expects; the store copies the rows (`store/merge.py`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from gymflow.core.config import ConfigError, EvalConfig, ShardSpec
from gymflow.environments.registry import RegistryError
from gymflow.rollouts.collection import collection_of, recorded_collection
from gymflow.rollouts.plan import RolloutKey, RunPlan, resolve
from gymflow.rollouts.published import published_progress
from gymflow.rollouts.registration import task_rows
from gymflow.store.db import StoreError
from gymflow.store.merge import (
    MergeReport,
    ShardInfo,
    ShardProgress,
    merge_into,
    read_shards,
    stored_progress,
)
from gymflow.store.remote import is_url
from gymflow.store.runs import RunInfo


def expected_plan(run: RunInfo) -> RunPlan:
    """The whole run's plan, from the config a shard stored: it names every expected task."""
    try:
        config = EvalConfig.model_validate_json(run.config_json)
        plan = resolve(
            config.model_copy(update={"shard": ShardSpec(index=0, count=run.shard_count)})
        )
    except (ConfigError, RegistryError, ValueError) as exc:
        raise StoreError(
            f"cannot resolve run {run.run_id}'s stored config to list its tasks: {exc}"
        ) from None
    check_collected_as(plan, run)
    return plan


def check_collected_as(plan: RunPlan, run: RunInfo) -> None:
    """A shard's stored run is the plan's run, at the plan's benchmark version."""
    if plan.run_id != run.run_id:
        raise StoreError(
            f"run {run.run_id}'s stored config hashes to {plan.run_id} under this gymflow "
            f"({run.gymflow_version} collected it): aggregate with the version that ran it"
        )
    if plan.benchmark_version != run.benchmark_version:
        raise StoreError(
            f"run {run.run_id} was collected at benchmark version "
            f"{run.benchmark_version}, but this machine's benchmark is version "
            f"{plan.benchmark_version}; aggregate where the benchmark matches"
        )


def check_one_collection(
    run_dir: Path | str, shards: list[ShardInfo], collection: str | None
) -> None:
    """The shards are of one collection of the run (`rollouts/collection.py`): `collection`
    when the flow that planned them gives it, and the one the run store was merged from, if it
    names one. Shards of one config stored by another invocation are never mixed in."""
    found = {str(s.path.parent): collection_of(s.run.config_json) for s in shards}
    wanted = {collection} if collection else set(found.values())
    recorded = recorded_collection(run_dir)
    if recorded is not None:
        wanted.add(recorded)
    if len(wanted) > 1 or any(c not in wanted for c in found.values()):
        listed = "; ".join(f"{path}: {c or '(none)'}" for path, c in found.items())
        expected = " and ".join(sorted(c or "(none)" for c in wanted))
        raise StoreError(
            f"shards of more than one collection of this run ({listed}; expected {expected}): "
            "each invocation of `gym eval run` collects anew; merge one collection's shards "
            "(ROOT/RUN_ID/COLLECTION) into a run store of its own"
        )


def all_keys(plan: RunPlan) -> list[RolloutKey]:
    """Every shard's rollout keys, in dataset order."""
    return [(task.task_id, r) for task in plan.all_tasks for r in range(plan.repeats)]


def merge_shards(
    run_dir: Path | str, shard_dirs: list[Path | str], plan: RunPlan | None = None
) -> MergeReport:
    """Merge `shard_dirs` into the store at `run_dir`, then count what is still missing.
    `plan`: the run's, with its shard count, when the caller has it (the flow that ran the
    shards); else resolved from the config the shards stored (`gym eval aggregate`)."""
    with tempfile.TemporaryDirectory(prefix="gymflow-shards-") as folder:
        shards = read_shards(run_dir, shard_dirs, Path(folder))
        check_one_collection(run_dir, shards, plan.config.shard.collection if plan else None)
        if plan is None:
            plan = expected_plan(shards[0].run)
        else:
            check_collected_as(plan, shards[0].run)
        return merge_into(
            run_dir,
            shards,
            run_id=plan.run_id,
            shard_count=plan.config.shard.count,
            task_rows=task_rows(plan, plan.all_tasks),
            keys=all_keys(plan),
        )


def shard_progress(plan: RunPlan) -> ShardProgress:
    """How much of a shard's plan its store at `plan.run_dir` holds (read-only), or, for a
    shard published at a URL, its committed result."""
    shard = plan.config.shard
    if is_url(plan.config.out):
        return published_progress(
            plan.config.out, plan.run_id, plan.keys(), shard.index, shard.count, shard.collection
        )
    return stored_progress(plan.run_dir, plan.run_id, plan.keys(), shard.index, shard.count)
