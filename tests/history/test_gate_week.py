"""A week of nightly runs, one of which regressed: the catalog lists them, the trend draws them,
and the gate fails the regressed night only (a CUSUM against a pinned baseline: by default the
earliest run)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pytest

from gymflow.history.catalog import refresh
from gymflow.history.gate import ALLOWANCE, LIMIT, THRESHOLD, gate, sequence
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder, reseal
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed

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
        reseal(con)
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
    verdicts = {}  # each night's, read again below (every gate reads each night since the first)
    for night, run_dir in enumerate(week[1:], start=1):
        verdict = gate(run_dir, margin=0.05)  # the pinned baseline by default: the earliest run
        named = gate(run_dir, baseline=baseline, margin=0.05)
        assert verdict.checks == named.checks and verdict.passed == named.passed
        # each says how its baseline was chosen, and that it is not pinned
        assert verdict.baseline is not None and named.baseline is not None
        assert verdict.baseline.chosen.startswith("the earliest run of its benchmark version")
        assert named.baseline.chosen == "given with --baseline"
        assert not verdict.baseline.pinned and not named.baseline.pinned
        verdicts[night] = verdict
        (found,) = verdict.checks
        assert found.against == "baseline" and found.run_dir == str(baseline)
        assert found.tasks == TASKS
        assert found.runs_in_sequence == night  # every night since the baseline fed the CUSUM
        regressed = night == REGRESSED_NIGHT
        assert found.regressed is regressed, (night, verdict.summary())
        assert verdict.passed is not regressed
        # the smallest drop caught tonight (80% power) is stated, at this run's standard error
        se = found.difference / found.statistic
        to_alarm = min(THRESHOLD + ALLOWANCE - found.cusum_before, LIMIT)
        expected = (to_alarm + 0.8416212335729143) * se
        assert found.detectable_drop == pytest.approx(expected)
        assert f"a drop of {100 * expected:.1f} points is caught tonight" in found.why
    caught = verdicts[REGRESSED_NIGHT].checks[0]
    assert caught.difference < -0.2 and caught.ci95[1] < 0 and caught.statistic < -LIMIT
    # the alarm restarts the CUSUM: the recovered night after it starts from 0
    assert verdicts[REGRESSED_NIGHT + 1].checks[0].cusum_before == 0.0
    assert "FAILED" in verdicts[REGRESSED_NIGHT].summary()


def test_the_cusum_adds_up_small_drops_and_forgets_after_an_alarm():
    assert (THRESHOLD, ALLOWANCE, LIMIT) == (7.0, 1.0, 3.5)  # the figures below assume them
    # t = -2.5 a night: 2.5 - 1 = 1.5 added each night, past 7 on the fifth, then from 0 again
    found = sequence([-2.5] * 6)
    assert [s for s, _ in found] == pytest.approx([1.5, 3.0, 4.5, 6.0, 7.5, 1.5])
    assert [alarmed for _, alarmed in found] == [False] * 4 + [True, False]
    # within the allowance nothing adds up
    assert sequence([0.5, -1.0, 3.0]) == [(0.0, False)] * 3
    # a large drop alarms on its first night, through the single-night limit
    assert sequence([-3.6, 0.0]) == [(pytest.approx(2.6), True), (0.0, False)]


def test_a_comparison_not_made_is_stated_and_fails_the_gate(week, tmp_path):
    verdict = gate(week[1], baseline=tmp_path / "no-such-run", margin=0.05)
    (found,) = verdict.checks
    assert not found.compared and found.why.startswith("not compared")
    assert not verdict.passed
    assert verdict.as_dict()["checks"][0]["compared"] is False


def test_the_first_run_has_nothing_to_compare_with(week):
    verdict = gate(week[0])
    assert verdict.checks == () and verdict.passed
    assert "nothing to compare with" in verdict.summary()


def test_an_alarm_within_the_margin_passes(week):
    verdict = gate(week[REGRESSED_NIGHT], margin=0.5)
    assert verdict.passed
    assert "alarm, but within the 50.0-point margin" in verdict.checks[0].why


def test_the_catalog_is_a_queryable_duckdb_file_rebuilt_from_the_stores(week):
    root = week[0].parent
    catalog = refresh(root)
    assert [e.run_id for e in catalog.of_benchmark("arithmetic-test")] == [
        f"night-{n}" for n in range(NIGHTS)
    ]
    assert catalog.path is not None and not catalog.path.is_relative_to(root)
    with duckdb.connect(str(catalog.path), read_only=True) as con:
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
    regressed = gym("runs", "gate", str(week[REGRESSED_NIGHT]), "--json", cwd=tmp_path)
    assert regressed.returncode == 2, regressed.stderr
    assert json.loads(regressed.stdout)["passed"] is False
    fine = gym("runs", "gate", str(week[-1]), "--baseline", str(week[0]), cwd=tmp_path)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "regression gate passed" in fine.stdout
    missing = gym("runs", "trend", "no-such-benchmark", "--root", str(root), cwd=tmp_path)
    assert missing.returncode == 1 and "no run of 'no-such-benchmark'" in missing.stderr
