"""pass@k and pass^k against exact binomial coefficients; the clustered standard error by hand."""

from __future__ import annotations

import math
import random

import pytest

from gymflow.analysis.passk import pass_at_k, pass_hat_k
from gymflow.analysis.stats import ci95, clustered_stderr


def _exact_pass_at_k(n: int, c: int, k: int) -> float:
    return 1 - math.comb(n - c, k) / math.comb(n, k)


def _pairs() -> list[tuple[int, int, int]]:
    rng = random.Random(7)
    cases = []
    for _ in range(2000):
        n = rng.randint(1, 60)
        c = rng.choice([0, n, rng.randint(0, n)])
        k = rng.choice([1, n, rng.randint(1, n)])
        cases.append((n, c, k))
    cases += [(1, 0, 1), (1, 1, 1), (5, 0, 5), (5, 5, 5), (200, 3, 200), (200, 197, 150)]
    return cases


def test_pass_at_k_matches_exact_binomials() -> None:
    for n, c, k in _pairs():
        assert pass_at_k(n, c, k) == pytest.approx(_exact_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_hat_k_matches_exact_binomials() -> None:
    for n, c, k in _pairs():
        assert pass_hat_k(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def test_edges() -> None:
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 4) == 1.0  # n = k: any pass among all samples
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    for bad in [(3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_clustered_stderr_by_hand() -> None:
    # Three tasks with 4 repeats each: per-task means 1.0, 0.5, 0.0.
    means = [1.0, 0.5, 0.0]
    # sample variance over tasks = ((0.5)^2 + 0 + (0.5)^2) / 2 = 0.25; SE = sqrt(0.25 / 3)
    assert clustered_stderr(means) == pytest.approx(math.sqrt(0.25 / 3))
    low, high = ci95(0.5, clustered_stderr(means))
    assert low == pytest.approx(0.5 - 1.959963984540054 * math.sqrt(0.25 / 3))
    assert high == pytest.approx(0.5 + 1.959963984540054 * math.sqrt(0.25 / 3))
    assert math.isnan(clustered_stderr([0.3]))
