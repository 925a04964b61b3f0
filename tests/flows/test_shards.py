"""Sharded runs through Prefect: shards here, aggregate, refusal, and resuming after a failure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from gymflow.core.config import EvalConfig, Sampling, ShardSpec
from gymflow.flows.aggregate import aggregate
from gymflow.flows.eval_run import evaluation_loop
from gymflow.flows.eval_shard import eval_shard
from gymflow.flows.fan_out import ShardFailed
from gymflow.flows.parameters import ScaleOptions, shard_dir
from gymflow.flows.reverify import reverify
from gymflow.rollouts.collection import recorded_collection
from gymflow.store.db import store_path
from gymflow.store.seal_key import load_key
from gymflow.store.sealed_inputs import seal_inputs
from gymflow.store.sealed_rows import seal_rows
from tests.conftest import gym

pytestmark = pytest.mark.prefect

LIMIT = 30  # tasks; x4 repeats (arithmetic-smoke)
ROWS = """
    SELECT r.rollout_id, r.task_id, r.repeat_index, v.reward, v.passed, r.trajectory_json
    FROM rollouts r LEFT JOIN verifications v USING (rollout_id) ORDER BY r.rollout_id
"""


def rows(run_dir: Path | str, sql: str = ROWS) -> list[tuple]:
    con = duckdb.connect(str(store_path(run_dir)), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def snapshot(run_dir: Path | str) -> dict[str, list[tuple]]:
    """Every merged table, ordered: what 'changes nothing' compares."""
    tables = {
        "runs": "SELECT * EXCLUDE (created_at) FROM runs",
        "shards": "SELECT * FROM shards ORDER BY ALL",
        "tasks": "SELECT * FROM tasks ORDER BY ALL",
        "rollouts": ROWS,
        "model_calls": "SELECT * FROM model_calls ORDER BY rollout_id, call_index, attempt",
        "verifications": "SELECT * FROM verifications ORDER BY ALL",
    }
    return {name: rows(run_dir, sql) for name, sql in tables.items()}


def config(out: Path, seed: int = 0) -> EvalConfig:
    return EvalConfig(
        benchmark="arithmetic-smoke",
        limit=LIMIT,
        sampling=Sampling(temperature=0.7, max_output_tokens=256, seed=seed),
        out=str(out),
    )


@pytest.fixture(scope="module")
def runs(prefect_api, tmp_path_factory) -> dict[str, Path]:
    """One unsharded and one 2-shard run of the same config, through the eval-run flow."""
    root = tmp_path_factory.mktemp("shards")
    whole = evaluation_loop(config(root / "whole"))
    state = evaluation_loop(
        config(root / "sharded"), scale=ScaleOptions(shards=2), return_state=True
    )
    # the collection the run planned: where its shards are
    assert state.result().collection is not None
    sharded = state.result()
    return {
        "root": root,
        "whole": Path(whole.run_dir),
        "sharded": Path(sharded.run_dir),
        "result": sharded,
        "flow_run_id": state.state_details.flow_run_id,
    }


def shard_dirs(run_dir: Path, shards: int = 2, collection: str | None = None) -> list[Path]:
    """The shard stores of the run at `run_dir`, of the collection its store was merged from
    (or `collection`)."""
    run_id = config(run_dir).fingerprint()
    scale = ScaleOptions(shards=shards, collection=collection or recorded_collection(run_dir))
    return [Path(shard_dir(config(run_dir), scale, run_id, i)) for i in range(shards)]


def test_two_shards_aggregate_to_the_unsharded_run(runs) -> None:
    whole, sharded = rows(runs["whole"]), rows(runs["sharded"])
    assert len(whole) == LIMIT * 4
    assert sharded == whole
    # each shard store holds only its own tasks, and together they hold every rollout once
    per_shard = [rows(d) for d in shard_dirs(runs["sharded"])]
    assert all(per_shard)
    assert sorted(r for shard in per_shard for r in shard) == whole
    aggregate = runs["result"].aggregate
    assert aggregate.complete and aggregate.stored == LIMIT * 4
    assert runs["result"].analysis.health.verdict == "healthy"
    assert runs["result"].analysis.profile.coverage.missing == 0


def test_the_flow_run_carries_its_artifacts(runs) -> None:
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[runs["flow_run_id"]]))
        )
    by_key = {a.key: a for a in artifacts}
    keys = {"gymflow-report", "gymflow-headline", "gymflow-summary", "gymflow-progress"}
    assert set(by_key) == keys
    assert runs["result"].report in str(by_key["gymflow-report"].data)
    headline = json.loads(by_key["gymflow-headline"].data)
    metrics = [row["metric"] for row in headline]
    assert len(metrics) == len(set(metrics)), "each figure once"
    pass1 = f"{100 * runs['result'].analysis.profile.pass_at_1:.1f}%"
    assert {"metric": "pass@1", "value": pass1} == {
        k: v for k, v in headline[0].items() if k != "95% CI"
    }
    summary = by_key["gymflow-summary"].data
    for part in ("Recommended next action", f"pass@1 = {pass1}", "Coverage:", "| k | pass@k"):
        assert part in summary
    assert by_key["gymflow-progress"].data == 100.0


def test_aggregating_again_changes_nothing(runs) -> None:
    before = snapshot(runs["sharded"])
    dirs = [str(d) for d in shard_dirs(runs["sharded"])]
    result = gym(
        "eval",
        "aggregate",
        *dirs,
        dirs[0],
        "--out",
        str(runs["sharded"]),
        cwd=runs["root"],
        check=True,
    )
    assert "complete" in result.stdout
    assert snapshot(runs["sharded"]) == before


def test_one_shard_reports_the_missing_pairs(runs, tmp_path) -> None:
    first, second = shard_dirs(runs["sharded"])
    result = gym(
        "eval",
        "aggregate",
        str(first),
        "--out",
        str(tmp_path / "partial"),
        "--json",
        "--strict",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    report = json.loads(result.stdout)
    missing = {tuple(pair) for pair in report["missing"]}
    assert missing == {(task_id, repeat) for _, task_id, repeat, *_ in rows(second)}
    assert report["shards_missing"] == [1]
    # the partial run store counts the absent shard's tasks as expected, so coverage says so
    assert rows(tmp_path / "partial", "SELECT count(*) FROM tasks") == [(LIMIT,)]


def test_a_shard_of_another_config_is_refused(runs, tmp_path) -> None:
    other = tmp_path / "other"
    eval_shard(config(other, seed=7).model_copy(update={"shard": ShardSpec(index=0, count=2)}))
    before = snapshot(runs["sharded"])
    result = gym(
        "eval",
        "aggregate",
        str(shard_dirs(runs["sharded"])[0]),
        str(other),
        "--out",
        str(runs["sharded"]),
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert f"{other}: refused" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(runs["sharded"]) == before


@contextmanager
def locked(store: Path):
    """Another process holds the store's write lock (DuckDB allows one writer process)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


LOCK_HOLDER = (
    "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('locked', flush=True); "
    "sys.stdin.read()"
)


def test_a_failed_shard_is_rerun_alone_and_only_its_missing_rollouts(runs, tmp_path) -> None:
    """Shard 1's store is held by another process: shard 1 fails, so the run fails; once it is
    released, resuming skips the complete shard 0 and runs only shard 1's missing rollouts."""
    out = tmp_path / "retry"
    # named, as a Prefect retry of the flow run names it again; the resume below finds it
    collection = "c20261205T000000-0000abcd"
    first, second = shard_dirs(out, collection=collection)
    # shard 1 already holds some rollouts (an earlier, interrupted attempt)
    shutil.copytree(shard_dirs(runs["sharded"])[1], second)
    con = duckdb.connect(str(store_path(second)))
    kept = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
    for table in ("verifications", "model_calls"):
        con.execute(
            f"DELETE FROM {table} WHERE rollout_id IN "
            "(SELECT rollout_id FROM rollouts WHERE repeat_index = 3)"
        )
    deleted = con.execute("DELETE FROM rollouts WHERE repeat_index = 3").fetchone()[0]
    # of this run's collection (a copy of another collection's shard is refused at the merge)
    con.execute(
        "UPDATE runs SET config_json = replace(config_json, ?, ?)",
        [runs["result"].collection, collection],
    )
    # as an interrupted attempt leaves it: its committed batches' rows sealed, no more
    seal_rows(con, load_key(create=False))
    seal_inputs(con, load_key(create=False))  # its run row names this collection
    con.close()
    assert 0 < deleted < kept

    with locked(store_path(second)), pytest.raises(ShardFailed, match="1 of 2 shards failed"):
        evaluation_loop(
            config(out),
            scale=ScaleOptions(
                shards=2, shard_retries=1, shard_retry_delay_s=0, collection=collection
            ),
        )
    assert rows(first) == rows(shard_dirs(runs["sharded"])[0])
    assert len(rows(second)) == kept - deleted

    # --resume: the collection the run store was merged from (shard 0, before shard 1 failed)
    result = evaluation_loop(config(out), resume=True, scale=ScaleOptions(shards=2))
    assert result.collection == collection
    shard_0, shard_1 = result.shards
    assert shard_0.ran is False and shard_0.progress.complete
    assert shard_1.ran is True and shard_1.progress.complete
    assert sum(batch.attempted for batch in shard_1.batches) == deleted
    assert result.aggregate.added["rollouts"] == kept
    assert rows(out) == rows(runs["whole"])
    calls = "SELECT count(*), count(DISTINCT (rollout_id, call_index, attempt)) FROM model_calls"
    assert rows(out, calls)[0][0] == rows(out, calls)[0][1]


def test_the_aggregate_and_reverify_flows(runs, tmp_path) -> None:
    merged = aggregate(str(tmp_path / "merged"), [str(d) for d in shard_dirs(runs["sharded"])])
    assert merged.aggregate.complete
    assert merged.analysis.profile.pass_at_1 == runs["result"].analysis.profile.pass_at_1
    assert rows(tmp_path / "merged") == rows(runs["whole"])

    result = reverify(str(tmp_path / "merged"), {"extract": "last_number"})
    assert result.status == "written"
    assert result.reverified == LIMIT * 4
    assert result.new_version != result.base_version
    versions = rows(tmp_path / "merged", "SELECT count(*) FROM verifier_versions")
    assert versions == [(2,)]
