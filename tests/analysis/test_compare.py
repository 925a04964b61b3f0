"""The paired comparison against a hand-computed example, pairing on common tasks, McNemar's
power as printed, and refusals."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats as sps

from gymflow.analysis.compare import CompareError, compare
from gymflow.analysis.paired import mcnemar_power
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym_in_process as gym  # reads stored runs: no process needed

A = {"t0": "11", "t1": "10", "t2": "00", "t3": "11", "t4": "01"}
B = {"t0": "11", "t1": "00", "t2": "11", "t3": "00", "t4": "10"}


def _write(path: Path, outcomes: dict[str, str], meta: RunMeta) -> Path:
    b = StoreBuilder(meta)
    for i, (task_id, marks) in enumerate(outcomes.items()):
        b.task(task_id, 40 + i)
        b.fill(task_id, marks)
    return b.write(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    _write(root / "a", A, RunMeta(run_id="run-a"))
    _write(root / "b", B, RunMeta(run_id="run-b", model="model-b"))
    _write(
        root / "c",
        B,
        RunMeta(run_id="run-c", model="model-c", verifier_params={"extract": "last_number"}),
    )
    _write(root / "other", B, RunMeta(run_id="run-o", benchmark_version="bench-v2"))
    # Same protocol, a subset of the rows (t1 missing) and one task A never saw.
    subset = {k: v for k, v in B.items() if k != "t1"} | {"t9": "11"}
    _write(root / "subset", subset, RunMeta(run_id="run-s", model="model-b"))
    return root


def _compare(root: Path, a: str, b: str) -> dict:
    """The comparison as `--json` prints it."""
    con_a, con_b = connect(root / a, read_only=True), connect(root / b, read_only=True)
    try:
        return compare(con_a, con_b).as_json()
    finally:
        con_a.close()
        con_b.close()


def test_hand_computed_pairing(runs: Path) -> None:
    result = _compare(runs, "a", "b")
    # per-task pass rates: A = 1, .5, 0, 1, .5; B = 1, 0, 1, 0, .5; d = 0, .5, -1, 1, 0
    assert result["tasks"] == 5
    assert result["difference"] == pytest.approx(0.1)
    sd = math.sqrt(2.2 / 4)  # squared deviations from 0.1 sum to 2.2
    assert result["stderr"] == pytest.approx(sd / math.sqrt(5))
    half = sps.t.ppf(0.975, 4) * sd / math.sqrt(5)  # paired t, tasks - 1 degrees of freedom
    assert 0.1 + half > 1.0  # five tasks: the t interval reaches past a difference of 100%
    assert result["ci95"] == pytest.approx([0.1 - half, 1.0], abs=1e-12)
    expected_r = statistics.correlation([1, 0.5, 0, 1, 0.5], [1, 0, 1, 0, 0.5])
    assert result["correlation"] == pytest.approx(expected_r)
    # majority verdicts: A solves t0, t3; B solves t0, t2
    assert result["flipped"] == {"a_only": ["t3"], "b_only": ["t2"]}
    assert result["mcnemar"]["method"] == "exact binomial"
    assert result["mcnemar"]["p_value"] == 1.0
    # One test per verdict: the p-value and power are the paired t's, like the CI.
    assert result["test"].startswith("paired t test on per-task pass-rate differences")
    assert result["p_value"] == pytest.approx(sps.ttest_1samp([0, 0.5, -1, 1, 0], 0.0).pvalue)
    assert result["power"]["test"] == result["test"]
    assert result["power"]["sd_differences"] == pytest.approx(sd)
    assert result["power"]["minimum_detectable_difference"] is None  # 5 tasks, sd 0.74
    # The share solved by majority is a second quantity, with McNemar's test and power.
    power = result["majority_power"]
    assert power["test"].startswith("McNemar's test on the share of tasks solved by majority")
    assert power["discordant_share"] == pytest.approx(2 / 5)
    assert power["minimum_detectable_difference"] is None  # 5 tasks cannot reach 80%
    assert "do not reach 80% power" in power["minimum_detectable_difference_reason"]
    needed = power["tasks_needed"]
    assert mcnemar_power(needed, 0.4, 0.05) >= 0.8 > mcnemar_power(needed - 1, 0.4, 0.05)
    assert result["unpaired_tasks"] == {"a_only": 0, "b_only": 0}
    assert result["unpaired_task_ids"] == {"a_only": [], "b_only": []}
    assert [f["factor"] for f in result["factors"]] == ["model"]
    assert "attributed to it" in result["attribution"]


def test_more_than_one_factor_is_not_attributed(runs: Path) -> None:
    result = _compare(runs, "a", "c")
    assert {f["factor"] for f in result["factors"]} == {"model", "verifier version"}
    assert "cannot be attributed to any one of them" in result["attribution"]


def test_different_benchmark_versions_are_refused(runs: Path) -> None:
    with pytest.raises(CompareError, match="different benchmark versions"):
        _compare(runs, "a", "other")
    out = gym("eval", "profile", "a", "--compare", "other", cwd=runs)
    assert out.returncode == 1
    assert "different benchmark versions" in out.stderr


def test_runs_of_one_protocol_pair_on_the_tasks_both_hold(runs: Path) -> None:
    result = _compare(runs, "a", "subset")
    assert result["tasks"] == 4
    assert result["unpaired_tasks"] == {"a_only": 1, "b_only": 1}
    assert result["unpaired_task_ids"] == {"a_only": ["t1"], "b_only": ["t9"]}
    # d over t0, t2, t3, t4 = 0, -1, 1, 0
    assert result["difference"] == pytest.approx(0.0)
    text = gym("eval", "profile", "a", "--compare", "subset", cwd=runs, check=True).stdout
    flat = " ".join(text.split())
    assert "not paired: 1 tasks scored in A only: t1" in flat
    assert "not paired: 1 tasks scored in B only: t9" in flat


def test_compare_cli_json_and_text(runs: Path) -> None:
    payload = json.loads(
        gym("eval", "profile", "a", "--compare", "b", "--json", cwd=runs, check=True).stdout
    )
    assert payload["difference"] == pytest.approx(0.1)
    assert payload["profiles"]["a"]["pass@1"] == pytest.approx(0.6)
    assert payload["power"]["difference"] == 0.05
    text = gym("eval", "profile", "a", "--compare", "c", cwd=runs, check=True).stdout
    assert "A - B = 10.0%" in text
    assert "vary one thing at a time" in text
    flat = " ".join(text.split())
    assert "power of McNemar's test" in flat and "power of paired t test" in flat
    assert "minimum detectable difference in pass rate" in flat
    assert "minimum detectable difference in share solved" in flat
    assert "correlation 0.00" in flat or "correlation -" in flat or "correlation n/a" in flat
    wide = gym(
        "eval", "profile", "a", "--compare", "b", "--power-difference", "0.3", "--json", cwd=runs
    )
    power = json.loads(wide.stdout)["power"]
    assert power["difference"] == 0.3 and power["tasks_needed"] is not None
