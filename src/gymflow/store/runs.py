"""Run metadata in the store: registering a run and its tasks, and reading them back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymflow import __version__
from gymflow.core.tasks import Task
from gymflow.rollouts.plan import RolloutKey, RunPlan, shard_of
from gymflow.store.db import StoreError
from gymflow.store.writer import insert_rows, register_verifier_version
from gymflow.verifier_identity import code_hash
from gymflow.verifiers.base import get_verifier


def check_run_store(
    con, run_dir: Path | str, run_id: str, *, resume: bool, benchmark_version: str | None = None
) -> None:
    """A store holds one run: another config is refused, and so are this run's stored rollouts
    unless resuming (so a second `gym eval run` never silently mixes into the first), and so is
    the same config over another benchmark version (a dataset file that changed since)."""
    stored = dict(con.execute("SELECT run_id, benchmark_version FROM runs").fetchall())
    if stored and run_id not in stored:
        raise StoreError(
            f"{run_dir}: holds run {sorted(stored)[0]}, but this config is run {run_id}; "
            "use another --out for a different config"
        )
    if benchmark_version is not None and stored.get(run_id, benchmark_version) != (
        benchmark_version
    ):
        raise StoreError(
            f"{run_dir}: holds run {run_id} on benchmark version {stored[run_id]}, but the "
            f"benchmark is now version {benchmark_version} (its dataset or protocol changed); "
            "use another --out"
        )
    if not resume and con.execute("SELECT count(*) FROM rollouts").fetchone()[0] > 0:
        raise StoreError(
            f"{run_dir}: already holds rollouts of this run; pass --resume to continue it "
            "or choose another --out"
        )


def register_run(con, plan: RunPlan, *, resume: bool) -> None:
    """Record the run and its shard's tasks, after `check_run_store`."""
    check_run_store(
        con, plan.run_dir, plan.run_id, resume=resume, benchmark_version=plan.benchmark_version
    )
    cfg = plan.config
    run_row = (
        plan.run_id,
        datetime.now(UTC).replace(tzinfo=None),
        __version__,
        cfg.model_dump_json(exclude={"shard"}),
        plan.run_id,
        plan.benchmark.name if plan.benchmark else None,
        plan.benchmark_version,
        plan.env.name,
        plan.dataset_version,
        plan.split,
        cfg.model.name,
        plan.harness,
        plan.template,
        plan.sampling.model_dump_json(),
        plan.repeats,
        cfg.shard.count,
        plan.verifier_version,
    )
    insert_rows(con, "runs", [run_row], on_conflict_ignore=True)
    con.execute(
        "INSERT OR IGNORE INTO shards VALUES (?, ?, ?)",
        [plan.run_id, cfg.shard.index, cfg.shard.count],
    )
    insert_rows(con, "tasks", task_rows(plan, plan.tasks), on_conflict_ignore=True)
    name = plan.env.manifest.verifier.name
    spec_params = {**plan.env.manifest.verifier.params, **plan.verifier_params}
    register_verifier_version(
        con,
        plan.verifier_version,
        name,
        spec_params,
        code_hash=code_hash(get_verifier(name)),
    )


def task_rows(plan: RunPlan, tasks: Iterable[Task]) -> list[tuple]:
    """`tasks` rows, each with the shard its task_id hashes to under the plan's shard count."""
    index = {task.task_id: i for i, task in enumerate(plan.all_tasks)}
    count = plan.config.shard.count
    return [
        (
            plan.run_id,
            t.task_id,
            index[t.task_id],
            shard_of(t.task_id, count),
            plan.prompts[t.task_id],
            t.reference,
            json.dumps(t.data, default=str),
            list(t.tags),
            t.difficulty,
        )
        for t in tasks
    ]


def missing_keys(con, run_id: str, wanted: list[RolloutKey]) -> list[RolloutKey]:
    """The `wanted` (task_id, repeat_index) pairs with no stored rollout, in their order.

    Only the wanted pairs are looked up: a batch of a long run must not read back every key the
    run holds (each batch of a million-rollout run would otherwise load a million keys)."""
    if not wanted:
        return []
    task_ids, repeats = zip(*wanted, strict=True)
    stored = con.execute(
        """
        SELECT k.task_id, k.repeat_index
        FROM (SELECT unnest($1) AS task_id, unnest($2) AS repeat_index) k
        SEMI JOIN rollouts r
          ON r.run_id = $3 AND r.task_id = k.task_id AND r.repeat_index = k.repeat_index
        """,
        [list(task_ids), list(repeats), run_id],
    ).fetchall()
    found = set(stored)
    return [key for key in wanted if key not in found]


def run_info(con) -> dict[str, Any]:
    cursor = con.execute("SELECT * FROM runs LIMIT 1")
    row = cursor.fetchone()
    if row is None:
        raise StoreError("store holds no run")
    return dict(zip([d[0] for d in cursor.description], row, strict=True))


def store_fingerprint(con) -> str:
    """Changes whenever rollouts or verifications are added: the cache key of pure analysis."""
    row = con.execute(
        """
        SELECT (SELECT count(*) FROM rollouts), (SELECT max(finished_at) FROM rollouts),
               (SELECT count(*) FROM verifications), (SELECT max(created_at) FROM verifications),
               (SELECT count(*) FROM verifier_versions)
        """
    ).fetchone()
    return "|".join(str(part) for part in row)
