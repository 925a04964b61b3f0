"""A run plan as store rows: the run, its shard, its tasks and its verifier version, built here
(from the plan the config resolves to) and handed to the store, which resolves nothing."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from gymflow import __version__
from gymflow.core.tasks import Task
from gymflow.rollouts.collect import RESUMABLE_KINDS
from gymflow.rollouts.plan import RunPlan, shard_of
from gymflow.store.db import connect
from gymflow.store.rows import run_row, shard_row, task_row, verifier_version_row
from gymflow.store.runs import record_run
from gymflow.store.superseded import supersede_failed
from gymflow.verifiers.base import get_verifier
from gymflow.verifiers.identity import code_hash


def register_run(con, plan: RunPlan, *, resume: bool) -> None:
    """Record the run and its shard's tasks (refused by `store.runs.check_run_store`)."""
    cfg = plan.config
    manifest = plan.env.manifest.verifier
    record_run(
        con,
        plan.run_dir,
        run=run_row(
            run_id=plan.run_id,
            created_at=datetime.now(UTC),
            gymflow_version=__version__,
            # which shard is the `shards` table's; which collection, the config's record
            # (`rollouts/collection.py`), so the merge never mixes two collections' shards
            config_json=cfg.model_dump_json(
                exclude={"shard": {"index", "count"}} if cfg.shard.collection else {"shard"}
            ),
            config_hash=plan.run_id,
            benchmark=plan.benchmark.name if plan.benchmark else None,
            benchmark_version=plan.benchmark_version,
            environment=plan.env.name,
            dataset_version=plan.dataset_version,
            split=plan.split,
            model=cfg.model.name,
            harness=plan.harness,
            prompt_template=plan.template,
            sampling_json=plan.sampling.model_dump_json(),
            repeats=plan.repeats,
            shard_count=cfg.shard.count,
            verifier_version=plan.verifier_version,
        ),
        shard=shard_row(plan.run_id, cfg.shard.index, cfg.shard.count),
        tasks=task_rows(plan, plan.tasks),
        verifier_version=verifier_version_row(
            verifier_version=plan.verifier_version,
            verifier_name=manifest.name,
            params={**manifest.params, **plan.verifier_params},
            source="gymflow",
            created_at=datetime.now(UTC),
            code_hash=code_hash(get_verifier(manifest.name)),
        ),
        resume=resume,
    )


def task_rows(plan: RunPlan, tasks: Iterable[Task]) -> list[tuple]:
    """`tasks` rows, each with the shard its task_id hashes to under the plan's shard count."""
    index = {task.task_id: i for i, task in enumerate(plan.all_tasks)}
    count = plan.config.shard.count
    return [
        task_row(
            run_id=plan.run_id,
            task_id=t.task_id,
            task_index=index[t.task_id],
            shard_index=shard_of(t.task_id, count),
            prompt=plan.prompts[t.task_id],
            reference=t.reference,
            data=t.data,
            tags=t.tags,
            difficulty=t.difficulty,
            json_of=_task_json,
        )
        for t in tasks
    ]


def _task_json(data) -> str:
    """A task's data as the store has always held it (`json.dumps`'s spacing: dataset versions
    and exports hash it)."""
    return json.dumps(data, default=str)


def prepare_run(plan: RunPlan, resume: bool, retry_failed: bool = False) -> None:
    """Register the run in its store; with `retry_failed` (resuming), set aside the rollouts
    whose last attempt failed for a transient reason, so they count as missing and run again.
    Called with the store held for the collection (`store.db.held`): its connection is the
    one the batches then write through. A plain call, not a Prefect task: a task run's API
    round trips cost more than the registration itself, once per run and per shard."""
    with connect(plan.run_dir, create=True) as con:
        register_run(con, plan, resume=resume)
        if resume and retry_failed:
            supersede_failed(con, plan.run_id, RESUMABLE_KINDS)
