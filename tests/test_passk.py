"""pass@k and pass^k as production computes them (`pair_curves`, which the profile uses, and
`per_task_curves`, which the headline uses) against exact fractions and scipy's binomials; and the
headline's pass@k (what reverify, the history catalog and studies print) against exact binomials
and the profile's on one constructed store."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import comb

from gymflow.analysis.passk import pair_curves, per_task_curves
from gymflow.analysis.profile import headline, profile
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder


def _exact(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    return (
        1 - Fraction(math.comb(n - c, k), math.comb(n, k)),
        Fraction(math.comb(c, k), math.comb(n, k)),
    )


def _random_tasks(seed: int, count: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    rng = random.Random(seed)
    n = [rng.randint(1, largest) for _ in range(count)]
    c = [rng.choice([0, m, rng.randint(0, m)]) for m in n]
    n += [1, 1, 100, 100, 100, 7]
    c += [0, 1, 0, 100, 3, 6]
    return np.array(n), np.array(c)


def test_pair_curves_match_exact_fractions_to_k_100() -> None:
    n, c = _random_tasks(7, 300, 100)
    ks = np.arange(1, 101)
    at_table, hat_table, group = pair_curves(n, c, ks)
    for task, (nn, cc) in enumerate(zip(n.tolist(), c.tolist(), strict=True)):
        row = group[task]
        for j, k in enumerate(ks.tolist()):
            if k > nn:
                assert math.isnan(at_table[row, j]) and math.isnan(hat_table[row, j])
                continue
            at, hat = _exact(nn, cc, k)
            assert at_table[row, j] == pytest.approx(float(at), abs=1e-12), (nn, cc, k)
            assert hat_table[row, j] == pytest.approx(float(hat), abs=1e-12), (nn, cc, k)


def test_per_task_curves_match_scipy_binomials() -> None:
    n, c = _random_tasks(3, 500, 40)
    ks = np.arange(1, 41)
    at, hat = per_task_curves(n, c, ks)
    assert at.shape == hat.shape == (len(n), len(ks))
    for row, (nn, cc) in enumerate(zip(n.tolist(), c.tolist(), strict=True)):
        k = ks[ks <= nn]
        expected_at = 1 - comb(nn - cc, k) / comb(nn, k)
        expected_hat = comb(cc, k) / comb(nn, k)
        np.testing.assert_allclose(at[row, : len(k)], expected_at, rtol=0, atol=1e-12)
        np.testing.assert_allclose(hat[row, : len(k)], expected_hat, rtol=0, atol=1e-12)
        assert np.isnan(at[row, len(k) :]).all() and np.isnan(hat[row, len(k) :]).all()


def test_tasks_sharing_a_profile_share_a_row() -> None:
    n = np.array([4, 4, 4, 2, 0])
    c = np.array([1, 1, 4, 0, 0])
    at_table, _, group = pair_curves(n, c, np.arange(1, 5))
    assert group[0] == group[1] and len({*group.tolist()}) == 4
    assert at_table[group[2]].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert at_table[group[1]][3] == 1.0  # n = k: any pass among all samples
    assert at_table[group[1]][0] == pytest.approx(0.25)
    assert np.isnan(at_table[group[4]]).all()  # nothing scored: counts for no k
    assert np.isnan(at_table[group[3]][2:]).all()
    empty_at, empty_hat, empty_group = pair_curves(np.array([]), np.array([]), np.arange(1, 3))
    assert empty_at.shape == (0, 2) and empty_hat.shape == (0, 2) and len(empty_group) == 0


# task -> its 3 repeats: '1' pass, '0' fail, 'x' a failed rollout, '-' missing
OUTCOMES = {"all": "111", "two": "110", "one": "010", "none": "000", "short": "1x-", "lost": "x01"}


def test_the_headline_pass_at_k_is_exact_and_the_profiles(tmp_path) -> None:
    b = StoreBuilder(RunMeta(repeats=3))
    for i, (task_id, marks) in enumerate(OUTCOMES.items()):
        b.task(task_id, 10 + i)
        b.fill(task_id, marks)
    con = connect(b.write(tmp_path / "run"), read_only=True)
    try:
        for as_zero in (False, True):
            head = headline(con, b.verifier_version, failures_as_zero=as_zero).as_json()
            full = profile(con, failures_as_zero=as_zero).as_json()
            # (n, c) per task: a failed rollout is left out, or scored as a fail ("lost" then
            # has 3 scored rollouts, so pass@3 counts it)
            counts = [
                (sum(m in ("01x" if as_zero else "01") for m in marks), marks.count("1"))
                for marks in OUTCOMES.values()
            ]
            eligible = [(n, c) for n, c in counts if n >= 3]
            exact = sum(1 - Fraction(math.comb(n - c, 3), math.comb(n, 3)) for n, c in eligible)
            assert head["tasks_at_k"] == {"3": len(eligible)} and full["tasks_at_k"]["3"] == len(
                eligible
            )
            assert head["pass@k"]["3"] == pytest.approx(float(exact / len(eligible)), abs=1e-12)
            assert head["pass@k"]["3"] == full["pass@k"]["3"]
            assert head["pass@1"] == full["pass@1"]
    finally:
        con.close()
