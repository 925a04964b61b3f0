"""A week of nightly runs, one of which regressed: the catalog lists them, the trend draws them,
and the gate fails the regressed night only (against the night before and a pinned baseline)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pytest

from gymflow.history.catalog import CATALOG_FILE, refresh
from gymflow.history.gate import gate
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym

TASKS, REPEATS, NIGHTS = 80, 4, 7
REGRESSED_NIGHT = 4  # 0-based: the fifth night
DROP = 0.3


def _night(root: Path, night: int, skill: np.ndarray) -> Path:
    """One nightly run: each task passes with its own probability, drawn with the night's seed."""
    rng = np.random.default_rng(1000 + night)
    meta = RunMeta(run_id=f"night-{night}", model=f"ckpt-{night}", repeats=REPEATS)
    builder = StoreBuilder(meta)
    for i, p in enumerate(skill):
        task_id = f"t{i:03d}"
        builder.task(task_id, answer=i)
        builder.fill(task_id, "".join("1" if u < p else "0" for u in rng.random(REPEATS)))
    run_dir = builder.write(root / f"2026-01-{night + 1:02d}")
    with connect(run_dir) as con:
        con.execute("UPDATE runs SET created_at = ?", [datetime(2026, 1, 1) + timedelta(night)])
    return run_dir


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("nightly")
    skill = np.random.default_rng(7).uniform(0.1, 0.95, TASKS)
    return [
        _night(root, n, np.clip(skill - (DROP if n == REGRESSED_NIGHT else 0), 0, 1))
        for n in range(NIGHTS)
    ]


def test_the_gate_catches_the_regression_and_raises_no_false_alarm(week):
    baseline = week[0]
    for night, run_dir in enumerate(week[1:], start=1):
        verdict = gate(run_dir, baseline=baseline, margin=0.05)
        by = {c.against: c for c in verdict.checks}
        assert by["previous"].run_dir == str(week[night - 1]), night
        assert by["baseline"].tasks == TASKS
        regressed = night == REGRESSED_NIGHT
        assert by["previous"].regressed is regressed, (night, verdict.summary())
        assert by["baseline"].regressed is regressed, (night, verdict.summary())
        assert verdict.passed is not regressed
    caught = gate(week[REGRESSED_NIGHT], baseline=baseline, margin=0.05)
    assert caught.checks[0].difference < -0.2
    assert caught.checks[0].ci95[1] < 0
    assert "FAILED" in caught.summary()


def test_a_comparison_not_made_is_stated_and_fails_the_gate(week, tmp_path):
    verdict = gate(week[1], baseline=tmp_path / "no-such-run", margin=0.05)
    by = {c.against: c for c in verdict.checks}
    assert by["previous"].compared and not by["previous"].regressed
    assert not by["baseline"].compared and by["baseline"].why.startswith("not compared")
    assert not verdict.passed
    assert verdict.as_dict()["checks"][1]["compared"] is False


def test_a_significant_drop_within_the_margin_passes(week):
    verdict = gate(week[REGRESSED_NIGHT], baseline=week[0], margin=0.5)
    assert verdict.passed
    assert all("within the 50.0-point margin" in c.why for c in verdict.checks)


def test_the_catalog_is_a_queryable_duckdb_file_rebuilt_from_the_stores(week):
    root = week[0].parent
    catalog = refresh(root)
    assert [e.run_id for e in catalog.of_benchmark("arithmetic-test")] == [
        f"night-{n}" for n in range(NIGHTS)
    ]
    with duckdb.connect(str(root / CATALOG_FILE), read_only=True) as con:
        rows = con.execute(
            "SELECT run_id, scored FROM runs WHERE pass1 < 0.4 ORDER BY created_at"
        ).fetchall()
    assert rows == [(f"night-{REGRESSED_NIGHT}", TASKS * REPEATS)]
    with connect(week[1], read_only=True) as con:
        truth = con.execute(
            "SELECT avg(p) FROM (SELECT avg(passed::INT) AS p FROM verifications "
            "JOIN rollouts USING (rollout_id) GROUP BY task_id)"
        ).fetchone()[0]
    assert catalog.of_benchmark("arithmetic-test")[1].pass1 == pytest.approx(truth)


def test_runs_commands_as_a_user_runs_them(week, tmp_path):
    root = week[0].parent
    listed = gym("runs", "list", str(root), "--json", cwd=tmp_path, check=True)
    runs = json.loads(listed.stdout)["runs"]
    assert len(runs) == NIGHTS
    trend = gym("runs", "trend", "arithmetic-test", "--root", str(root), cwd=tmp_path, check=True)
    page = (root / "trend-arithmetic-test.html").read_text()
    assert page.count('data-field="pass@1"') == NIGHTS
    assert "<polyline" in page and "trend:" in trend.stdout
    regressed = gym("runs", "gate", str(week[REGRESSED_NIGHT]), "--baseline", str(week[0]),
                    "--json", cwd=tmp_path)  # fmt: skip
    assert regressed.returncode == 2, regressed.stderr
    assert json.loads(regressed.stdout)["passed"] is False
    fine = gym("runs", "gate", str(week[-1]), "--baseline", str(week[0]), cwd=tmp_path)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "regression gate passed" in fine.stdout
    missing = gym("runs", "trend", "no-such-benchmark", "--root", str(root), cwd=tmp_path)
    assert missing.returncode == 1 and "no run of 'no-such-benchmark'" in missing.stderr
