"""Profile numbers against direct computations (exact binomials, scipy, statsmodels) on constructed
runs whose outcomes are known."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from gymflow.analysis.profile import profile
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym_in_process as gym  # reads stored runs: no process needed

# task -> outcomes of its 4 repeats ('1' pass, '0' fail, 'x' a failed rollout, '-' missing)
OUTCOMES = {
    "t0": "1111",
    "t1": "1100",
    "t2": "1000",
    "t3": "0000",
    "t4": "10x-",  # 2 scored: k = 3, 4 leave it out
    "t5": "0111",
}
TAGS = {"t0": ("a",), "t1": ("a", "b"), "t2": ("b",), "t3": ("b",), "t4": ("a",), "t5": ()}
DIFFICULTY = {"t0": "easy", "t1": "easy", "t2": "hard", "t3": "hard", "t4": None, "t5": "easy"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = StoreBuilder(RunMeta(repeats=4))
    for i, (task_id, marks) in enumerate(OUTCOMES.items()):
        b.task(task_id, 10 + i, tags=TAGS[task_id], difficulty=DIFFICULTY[task_id])
        b.fill(task_id, marks)
    return b.write(tmp_path_factory.mktemp("profile") / "run")


@pytest.fixture(scope="module")
def result(run_dir: Path) -> dict:
    con = connect(run_dir, read_only=True)
    try:
        return profile(con).as_json()
    finally:
        con.close()


def _scored() -> dict[str, tuple[int, int]]:
    return {t: (m.count("1") + m.count("0"), m.count("1")) for t, m in OUTCOMES.items()}


def test_coverage_heads_the_profile(result: dict) -> None:
    assert result["coverage"] == {"expected": 24, "scored": 22, "failed": 1, "missing": 1}
    assert result["failures"] == "excluded from scores"


def test_pass_at_k_and_pass_hat_k_exact(result: dict) -> None:
    for k in range(1, 5):
        eligible = [(n, c) for n, c in _scored().values() if n >= k]
        at = sum(1 - math.comb(n - c, k) / math.comb(n, k) for n, c in eligible) / len(eligible)
        hat = sum(math.comb(c, k) / math.comb(n, k) for n, c in eligible) / len(eligible)
        assert result["pass@k"][str(k)] == pytest.approx(at, abs=1e-12)
        assert result["pass^k"][str(k)] == pytest.approx(hat, abs=1e-12)
        assert result["tasks_at_k"][str(k)] == len(eligible)
        # The retry value compares pass@k with pass@1 on the same tasks.
        pass1 = sum(c / n for n, c in eligible) / len(eligible)
        assert result["retry_value"][str(k)] == pytest.approx(at - pass1, abs=1e-12)
    assert result["tasks_at_k"] == {"1": 6, "2": 6, "3": 5, "4": 5}


def test_pass1_ci_is_wilson_on_the_clustered_effective_sample_size(result: dict) -> None:
    means = [c / n for n, c in _scored().values()]
    mean = statistics.fmean(means)
    se = statistics.stdev(means) / math.sqrt(len(means))
    assert result["pass@1"] == pytest.approx(mean)
    assert result["stderr"] == pytest.approx(se)
    # statsmodels' Wilson interval at n = p(1-p)/SE^2, at the alpha whose normal quantile is
    # the t quantile with tasks - 1 = 5 degrees of freedom.
    alpha = 2 * sps.norm.sf(sps.t.ppf(0.975, 5))
    n = mean * (1 - mean) / se**2
    expected = proportion_confint(mean * n, n, alpha=alpha, method="wilson")
    assert result["ci95"] == pytest.approx(list(expected), abs=1e-12)
    assert result["ci95_reason"] is None and "Wilson" in result["ci95_method"]
    for group in (*result["by_tag"].values(), *result["by_difficulty"].values()):
        if group["ci95"] is None:
            assert group["tasks"] == 1 and "one task" in group["ci95_reason"]
        else:
            assert 0.0 <= group["ci95"][0] <= group["pass@1"] <= group["ci95"][1] <= 1.0


def test_pass1_weights_tasks_equally_and_says_so(result: dict) -> None:
    pooled = sum(c for _, c in _scored().values()) / sum(n for n, _ in _scored().values())
    assert result["pass@1_rollout_weighted"] == pytest.approx(pooled)  # 11 of 22
    assert "weights every task equally" in result["weighting"]
    assert (
        f"{pooled:.1%}" in result["weighting"] and f"{result['pass@1']:.1%}" in result["weighting"]
    )


def test_variance_split_is_the_one_way_anova(result: dict) -> None:
    outcomes = [[float(m) for m in marks if m in "01"] for marks in OUTCOMES.values()]
    f = sps.f_oneway(*outcomes).statistic
    sizes = [len(o) for o in outcomes]
    total = sum(sizes)
    n0 = (total - sum(s * s for s in sizes) / total) / (len(sizes) - 1)
    got = result["variance"]["pass"]
    assert got["icc"] == pytest.approx((f - 1) / (f + n0 - 1), rel=1e-12)
    assert got["repeats_per_task"] == pytest.approx(n0)
    mean_inverse = statistics.fmean(1 / s for s in sizes)
    expected_deff = total / len(sizes) * (got["icc"] + (1 - got["icc"]) * mean_inverse)
    assert result["design_effect"] == pytest.approx(expected_deff)
    assert result["variance"]["reward"]["icc"] == pytest.approx(got["icc"])  # rewards are 0/1


def test_bootstrap_is_seeded_and_brackets_the_estimate(run_dir: Path, result: dict) -> None:
    con = connect(run_dir, read_only=True)
    try:
        again = profile(con).as_json()
        other = profile(con, seed=1).as_json()
    finally:
        con.close()
    assert again["pass@k_bootstrap_ci95"] == result["pass@k_bootstrap_ci95"]
    assert other["pass@k_bootstrap_ci95"] != result["pass@k_bootstrap_ci95"]
    for k, (low, high) in result["pass@k_bootstrap_ci95"].items():
        assert low <= result["pass@k"][k] <= high


def test_breakdowns_and_majority(result: dict) -> None:
    s = _scored()
    tag_a = [s[t][1] / s[t][0] for t in ("t0", "t1", "t4")]
    assert result["by_tag"]["a"]["tasks"] == 3
    assert result["by_tag"]["a"]["pass@1"] == pytest.approx(statistics.fmean(tag_a))
    assert set(result["by_tag"]) == {"a", "b"}  # t5 has no tag
    assert result["by_difficulty"]["(none)"]["tasks"] == 1
    assert result["by_difficulty"]["hard"]["pass@1"] == pytest.approx((0.25 + 0.0) / 2)
    # majority of extracted answers: t0 yes, t1 tie (1/2), t2 no, t3 no, t4 tie (1/2), t5 yes
    assert result["majority@k"] == {"4": pytest.approx((1 + 0.5 + 0 + 0 + 0.5 + 1) / 6)}
    assert result["usage"]["output_tokens"]["p50"] == 12.0


def test_failures_as_zero_and_cli(run_dir: Path) -> None:
    out = gym("eval", "profile", str(run_dir), "--json", "--failures-as-zero", cwd=run_dir.parent)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["failures"].startswith("counted")
    t4 = 1 / 3  # one pass among its three stored rollouts
    assert payload["pass@1"] == pytest.approx((1 + 0.5 + 0.25 + 0 + t4 + 0.75) / 6)
    text = gym("eval", "profile", str(run_dir), cwd=run_dir.parent, check=True).stdout
    assert "pass^k" in text and "majority@4" in text
    assert "weights every task equally" in " ".join(text.split())
    assert "ICC(1)" in text
    bad = gym("eval", "profile", str(run_dir), "--verifier-version", "nope@1", cwd=run_dir.parent)
    assert bad.returncode == 1 and "no verifier version 'nope@1'" in bad.stderr


def _small_run(root: Path, name: str, outcomes: dict[str, str]) -> dict:
    b = StoreBuilder(RunMeta(run_id=name, repeats=2))
    for i, (task_id, marks) in enumerate(outcomes.items()):
        b.task(task_id, 60 + i)
        b.fill(task_id, marks)
    con = connect(b.write(root / name), read_only=True)
    try:
        return profile(con).as_json()
    finally:
        con.close()


def test_small_and_ragged_runs(tmp_path: Path) -> None:
    # One task with one passing rollout (its second is missing) and one with two failing.
    ragged = _small_run(tmp_path, "ragged", {"t0": "1-", "t1": "00"})
    assert ragged["pass@1"] == 0.5 and ragged["pass@k"]["2"] == 0.0
    assert ragged["tasks_at_k"] == {"1": 2, "2": 1}
    assert ragged["retry_value"]["2"] == 0.0  # pass@2 and pass@1 on t1 alone, not -50%
    assert ragged["pass@k_bootstrap_ci95"]["2"] is None
    assert "a bootstrap over tasks needs two" in ragged["pass@k_bootstrap_ci95_reason"]["2"]
    assert ragged["pass@k_bootstrap_ci95_reason"]["1"] is None
    assert ragged["ci95"][0] >= 0.0 and ragged["ci95"][1] <= 1.0
    assert ragged["pass@1_rollout_weighted"] == pytest.approx(1 / 3)

    one = _small_run(tmp_path, "one", {"t0": "10"})
    assert one["ci95"] is None and "one task" in one["ci95_reason"]
    assert one["pass@k_bootstrap_ci95"] == {"1": None, "2": None}
    assert one["variance"]["pass"]["icc"] is None and one["design_effect"] is None
    assert "fewer than two tasks" in one["variance"]["pass"]["reason"]

    text = gym("eval", "profile", str(tmp_path / "one"), cwd=tmp_path, check=True).stdout
    assert "95% CI n/a: one task" in " ".join(text.split())
