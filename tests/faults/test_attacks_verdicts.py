"""Verdicts rewritten in the store: scores count `passed`, so `UPDATE verifications SET passed =
true WHERE NOT passed` took pass@1 from 59% to 100% and health stayed healthy (`passed = NULL`
on 50 rows: 34%, healthy). A verdict that is not its reward judged by the environment's pass
threshold is now an integrity failure: the run is unhealthy and the gate fails."""

from __future__ import annotations

import json

import duckdb
import pytest

from tests.conftest import gym
from tests.faults.stores import collect_run, rollout_rows


@pytest.mark.parametrize(
    "forgery",
    [
        "UPDATE verifications SET passed = true WHERE NOT passed",
        "UPDATE verifications SET passed = NULL WHERE rollout_id IN "
        "(SELECT rollout_id FROM verifications LIMIT 3)",
        "UPDATE verifications SET passed = false WHERE passed",
    ],
    ids=["failed_as_passed", "verdict_removed", "passed_as_failed"],
)
def test_a_verdict_that_disagrees_with_its_reward_makes_the_run_unhealthy(
    tmp_path, forgery: str
) -> None:
    run = collect_run(tmp_path / "run")
    healthy = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert json.loads(healthy.stdout)["checks"]["verdict_disagrees"]["count"] == 0

    con = duckdb.connect(str(run / "gymflow.duckdb"))
    changed = con.execute(forgery).fetchone()[0]
    con.close()
    assert changed > 0
    before = rollout_rows(run / "gymflow.duckdb")

    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode != 0, checked.stdout
    report = json.loads(checked.stdout)
    assert report["verdict"] == "unhealthy"
    assert report["checks"]["verdict_disagrees"]["count"] == changed
    assert "verdict_disagrees" in report["gate_failures"]
    assert rollout_rows(run / "gymflow.duckdb") == before  # health judges, it changes nothing
