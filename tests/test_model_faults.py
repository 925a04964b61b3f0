"""Faults at the model boundary: transient ones are retried; a rollout whose calls all fail is
stored as failed with its failure kind and counted in coverage, never as reward 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gymflow.analysis.profile import profile
from gymflow.core.config import EvalConfig
from gymflow.models.client import ResponsesClient
from gymflow.rollouts.collect import run_collect
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.simulated.endpoint import local_policy_server
from gymflow.store.db import connect


def _config(out: Path, **model) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "benchmark": "arithmetic-smoke",
            "limit": 10,
            "repeats": 3,
            "out": str(out),
            "model": {"backoff_s": 0.0, **model},
        }
    )


def test_transient_faults_are_retried(tmp_path: Path) -> None:
    plan = resolve(_config(tmp_path / "run", timeout_s=1.0, max_retries=3))
    task = plan.all_tasks[0]
    items = [{"type": "message", "role": "user", "content": plan.prompts[task.task_id]}]

    async def call(base_url: str):
        async with ResponsesClient(plan.config.model, base_url, plan.sampling) as client:
            return await client.create(items, tools=None, call_index=0, seed=1)

    with local_policy_server(plan) as server:
        schedule = {"schedule": ["429", "500", "timeout"]}
        httpx.post(
            f"http://127.0.0.1:{server.port}/_gymflow/faults", json=schedule
        ).raise_for_status()
        outcome = asyncio.run(call(server.base_url))
    assert outcome.error is None
    assert [c.failure_kind for c in outcome.calls] == [
        "rate_limited",
        "server_error",
        "timeout",
        None,
    ]
    assert [c.attempt for c in outcome.calls] == [0, 1, 2, 3]
    assert [c.http_status for c in outcome.calls][:2] == [429, 500]
    assert outcome.calls[-1].status == "completed"


def test_exhausted_retries_store_a_failed_rollout(tmp_path: Path) -> None:
    plan = resolve(_config(tmp_path / "run", max_retries=1, faults={"rate_500": 0.5}))
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    with local_policy_server(plan) as server:
        stats = run_collect(plan, plan.keys(), con, base_url=server.base_url)
    assert stats.attempted == 30
    assert 0 < stats.failed < 30, "rate 0.5 with one retry fails about a quarter of rollouts"

    failed = con.execute(
        "SELECT rollout_id, failure_kind, num_model_calls FROM rollouts WHERE status = 'failed'"
    ).fetchall()
    assert len(failed) == stats.failed
    assert {kind for _, kind, _ in failed} == {"server_error"}
    assert {calls for _, _, calls in failed} == {2}, "one call and one retry, both recorded"
    scored_failed = con.execute(
        "SELECT count(*) FROM verifications v JOIN rollouts r USING (rollout_id) "
        "WHERE r.status = 'failed'"
    ).fetchone()[0]
    assert scored_failed == 0, "a failed rollout has no reward at all, not a reward of 0"

    result = profile(con).as_json()
    assert result["coverage"] == {
        "expected": 30,
        "scored": 30 - stats.failed,
        "failed": stats.failed,
        "missing": 0,
    }
    passed = con.execute("SELECT count(*) FROM verifications WHERE passed").fetchone()[0]
    per_task = con.execute(
        """SELECT avg(v.passed::INT) FROM rollouts r JOIN verifications v USING (rollout_id)
           GROUP BY r.task_id"""
    ).fetchall()
    assert passed > 0
    assert result["pass@1"] == pytest.approx(sum(r[0] for r in per_task) / len(per_task))
    con.close()
