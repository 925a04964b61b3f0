"""Profile numbers against direct computations on a constructed run whose outcomes are known."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest

from gymflow.analysis.passk import per_task_curves
from gymflow.analysis.profile import profile
from gymflow.records import FAILED
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym

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
        for repeat, mark in enumerate(marks):
            if mark in "01":
                b.rollout(task_id, repeat, correct=mark == "1")
            elif mark == "x":
                record = b.rollout(task_id, repeat)
                record.status, record.failure_kind, record.verification = FAILED, "timeout", None
    return b.write(tmp_path_factory.mktemp("profile") / "run")


@pytest.fixture(scope="module")
def result(run_dir: Path) -> dict:
    con = connect(run_dir, read_only=True)
    try:
        return profile(con)
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
        assert result["retry_value"][str(k)] == pytest.approx(at - result["pass@1"])


def test_per_task_curves_match_binomials_on_random_pairs() -> None:
    rng = random.Random(3)
    n = np.array([rng.randint(1, 40) for _ in range(500)])
    c = np.array([rng.randint(0, int(x)) for x in n])
    ks = np.arange(1, 41)
    at, hat = per_task_curves(n, c, ks)
    for row, (nn, cc) in enumerate(zip(n.tolist(), c.tolist(), strict=True)):
        for j, k in enumerate(ks.tolist()):
            if k > nn:
                assert math.isnan(at[row, j]) and math.isnan(hat[row, j])
            else:
                exact = 1 - math.comb(nn - cc, k) / math.comb(nn, k)
                assert at[row, j] == pytest.approx(exact, abs=1e-12)
                assert hat[row, j] == pytest.approx(math.comb(cc, k) / math.comb(nn, k), abs=1e-12)


def test_clustered_stderr_direct(result: dict) -> None:
    means = [c / n for n, c in _scored().values()]
    mean = statistics.fmean(means)
    se = statistics.stdev(means) / math.sqrt(len(means))
    assert result["pass@1"] == pytest.approx(mean)
    assert result["stderr"] == pytest.approx(se)
    assert result["ci95"] == pytest.approx(
        [mean - 1.959963984540054 * se, mean + 1.96 * se], abs=1e-3
    )


def test_variance_components(result: dict) -> None:
    means = [c / n for n, c in _scored().values()]
    between = statistics.pvariance(means)
    within = statistics.fmean(p * (1 - p) for p in means)
    got = result["variance"]["pass"]
    assert got["between"] == pytest.approx(between)
    assert got["within"] == pytest.approx(within)
    assert got["icc"] == pytest.approx(between / (between + within))


def test_bootstrap_is_seeded_and_brackets_the_estimate(run_dir: Path, result: dict) -> None:
    con = connect(run_dir, read_only=True)
    try:
        again = profile(con)
        other = profile(con, seed=1)
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
    bad = gym("eval", "profile", str(run_dir), "--verifier-version", "nope@1", cwd=run_dir.parent)
    assert bad.returncode == 1 and "no verifier version 'nope@1'" in bad.stderr
