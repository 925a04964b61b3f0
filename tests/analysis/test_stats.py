"""gymflow's statistics against scipy and statsmodels on data gymflow never saw."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps
from statsmodels.stats.anova import anova_lm
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from gymflow.analysis.distributions import binomial_cdf, t_quantile, t_upper_tail
from gymflow.analysis.paired import (
    MCNEMAR_TEST,
    mcnemar,
    mcnemar_detectable,
    mcnemar_power,
    mcnemar_power_summary,
    mcnemar_tasks_needed,
    paired_t,
    paired_t_power,
    paired_t_power_summary,
)
from gymflow.analysis.stats import (
    Z95,
    _expanded_tail,
    bootstrap_ci95,
    bounded_mean_ci95,
    clustered_stderr,
    design_effect,
    variance_components,
    widened_band,
)


def test_t_distribution_matches_scipy() -> None:
    for df in [*range(1, 60), 99, 250, 999, 10_000, 1_000_000]:
        assert t_quantile(0.975, df) == pytest.approx(sps.t.ppf(0.975, df), rel=1e-12, abs=1e-9)
        assert t_quantile(0.8, df) == pytest.approx(sps.t.ppf(0.8, df), rel=1e-10)
        for t in (0.0, 0.3, 1.96, 4.0, 25.0):
            assert t_upper_tail(t, df) == pytest.approx(sps.t.sf(t, df), rel=1e-10, abs=1e-300)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


def test_clustered_stderr_is_the_standard_error_of_the_task_means() -> None:
    rng = np.random.default_rng(1)
    means = rng.random(37)
    assert clustered_stderr(means.tolist()) == pytest.approx(sps.sem(means), rel=1e-12)
    assert math.isnan(clustered_stderr([0.3]))


def _wilson_statsmodels(mean: float, se: float, tasks: int, rollouts: int) -> tuple[float, float]:
    """statsmodels' Wilson interval at n = mean(1-mean)/se^2 (at most the rollouts), with the
    alpha whose normal quantile is the t quantile at tasks - 1 degrees of freedom."""
    n = min(mean * (1 - mean) / se**2, rollouts)
    alpha = 2 * sps.norm.sf(sps.t.ppf(0.975, tasks - 1))
    return proportion_confint(mean * n, n, alpha=alpha, method="wilson")


def test_bounded_mean_ci_is_wilson_on_the_effective_sample_size() -> None:
    rng = np.random.default_rng(2)
    for tasks in (3, 10, 20, 100, 1000):
        rates = rng.binomial(4, rng.beta(2, 3, size=tasks)) / 4
        mean, se = float(rates.mean()), float(sps.sem(rates))
        got = bounded_mean_ci95(mean, se, tasks=tasks, rollouts=4 * tasks)
        assert got.bounds == pytest.approx(
            _wilson_statsmodels(mean, se, tasks, 4 * tasks), abs=1e-12
        )
        assert 0.0 <= got.bounds[0] < mean < got.bounds[1] <= 1.0


def test_bounded_mean_ci_stays_in_range_and_is_t_for_large_runs() -> None:
    # The demo's own tag: 2 tasks at 100% and 50%, where mean +- z * SE reached 103.3%.
    small = bounded_mean_ci95(0.75, 0.25, tasks=2, rollouts=4)
    assert small.bounds[0] >= 0.0 and small.bounds[1] <= 1.0
    # All tasks failing: no spread, so the interval rests on the number of tasks.
    zero = bounded_mean_ci95(0.0, 0.0, tasks=10, rollouts=40)
    q = sps.t.ppf(0.975, 9)
    assert zero.bounds == pytest.approx((0.0, q * q / (10 + q * q)), abs=1e-12)
    # Rewards in [-1, 2]: the same interval on the rescaled range.
    scaled = bounded_mean_ci95(0.5, 0.3, tasks=8, rollouts=16, low=-1.0, high=2.0)
    unit = bounded_mean_ci95(0.5, 0.1, tasks=8, rollouts=16)
    assert scaled.bounds == pytest.approx(tuple(-1 + 3 * b for b in unit.bounds))
    # 10,000 tasks near the middle: Wilson is the t interval to 4 decimals.
    big = bounded_mean_ci95(0.4, 0.004, tasks=10_000, rollouts=40_000)
    half = sps.t.ppf(0.975, 9999) * 0.004
    assert big.bounds == pytest.approx((0.4 - half, 0.4 + half), abs=1e-4)
    one = bounded_mean_ci95(0.5, float("nan"), tasks=1, rollouts=4)
    assert one.bounds is None and "one task" in one.reason


def test_paired_test_is_statsmodels_t_test_where_the_floor_does_not_bind() -> None:
    rng = np.random.default_rng(3)
    for d in (np.array([-0.9, 0.8]), *(rng.uniform(-1, 1, size=t) for t in (5, 30, 400))):
        assert ((d - d.mean()) ** 2).sum() >= 1  # spread out: the floor does not bind
        got = paired_t(d)
        described = DescrStatsW(d)
        expected = np.clip(described.tconfint_mean(alpha=0.05), -1.0, 1.0)
        assert got.interval.bounds == pytest.approx(tuple(expected), abs=1e-12)
        assert got.p_value == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-9)
        assert got.stderr == pytest.approx(described.std_mean, rel=1e-12)
    assert paired_t(np.array([0.5])).interval.bounds is None


def test_paired_test_has_no_zero_width_interval_when_every_task_agrees() -> None:
    """Changed on purpose (issue 30): the spread of differences is at least that of one task
    flipping completely among tasks that agree, so it is that sample's t test."""
    for tasks in (2, 5, 20, 200):
        got = paired_t(np.zeros(tasks))
        flipped = np.r_[np.ones(1), np.zeros(tasks - 1)]
        assert got.stderr == pytest.approx(1 / tasks)
        assert got.stderr == pytest.approx(DescrStatsW(flipped).std_mean)
        half = sps.t.ppf(0.975, tasks - 1) / tasks
        assert got.interval.bounds == pytest.approx((max(-half, -1), min(half, 1)))
        assert got.p_value == 1.0
    clipped = paired_t(np.array([1.0, 1.0, 0.9]))
    assert clipped.interval.bounds[0] >= -1.0 and clipped.interval.bounds[1] == 1.0
    floored_se = math.sqrt((2 / 3) / 2) / math.sqrt(3)  # sum of squares 2/3, 2 df
    assert clipped.p_value == pytest.approx(2 * sps.t.sf((2.9 / 3) / floored_se, 2))


@pytest.mark.parametrize("tasks", [2, 3, 10, 50, 400])
def test_paired_power_is_the_noncentral_t_power_of_statsmodels(tasks: int) -> None:
    from statsmodels.stats.power import TTestPower

    for sd, difference in ((0.3, 0.05), (0.3, 0.2), (0.1, 0.1)):
        expected = TTestPower().power(difference / sd, tasks, 0.05, alternative="two-sided")
        assert paired_t_power(tasks, sd, difference) == pytest.approx(expected, abs=1e-5)


def test_paired_power_figures_reach_80_percent() -> None:
    from statsmodels.stats.power import TTestPower

    d = np.random.default_rng(5).normal(0.02, 0.3, size=60)
    summary = paired_t_power_summary(paired_t(d), 0.05)
    sd = summary.sd_differences
    assert sd == pytest.approx(float(np.std(d, ddof=1)))
    detectable = summary.minimum_detectable_difference
    expected = TTestPower().solve_power(nobs=60, alpha=0.05, power=0.8) * sd
    assert detectable == pytest.approx(expected, abs=1e-4)
    needed = summary.tasks_needed
    assert paired_t_power(needed, sd, 0.05) >= 0.8 > paired_t_power(needed - 1, sd, 0.05)
    assert summary.power_now == pytest.approx(paired_t_power(60, sd, 0.05))
    one = paired_t_power_summary(paired_t(np.array([0.1])), 0.05)
    assert one.minimum_detectable_difference is None and one.tasks_needed is None


def test_a_band_is_never_a_point_when_every_task_agrees() -> None:
    """Changed on purpose (issue 30): the bootstrap band is widened to the Wilson-t interval on
    the effective sample size, which for tasks that all pass falls back to the task count."""
    values = np.ones((10, 1))
    low, high = bootstrap_ci95(values)
    assert (low[0], high[0]) == (1.0, 1.0)  # the bootstrap alone is a point
    band = widened_band(low[0], high[0], values[:, 0], independent=10)
    assert band == pytest.approx(bounded_mean_ci95(1.0, 0.0, tasks=10, rollouts=10).bounds)
    assert band[0] < 0.75 and band[1] == 1.0
    spread = np.random.default_rng(2).uniform(0, 1, 400)
    b_low, b_high = bootstrap_ci95(spread[:, None], samples=2000)
    wide = widened_band(b_low[0], b_high[0], spread, independent=1600)
    assert wide[0] <= b_low[0] and wide[1] >= b_high[0]
    assert wide[1] - wide[0] < 1.1 * (b_high[0] - b_low[0])  # many tasks: the two agree
    assert widened_band(0.5, 0.5, np.array([0.5, np.nan]), independent=1) is None


def test_bootstrap_is_the_expanded_percentile_interval() -> None:
    for m in (2, 3, 10, 100):
        expected = sps.norm.cdf(-math.sqrt(m / (m - 1)) * sps.t.ppf(0.975, m - 1))
        assert _expanded_tail(m) == pytest.approx(expected, rel=1e-9)
    # Many tasks: the bootstrap interval of a mean is the t interval, to Monte-Carlo error.
    rates = np.random.default_rng(8).binomial(4, 0.3, size=400)[:, None] / 4
    low, high = bootstrap_ci95(rates, samples=4000, seed=1)
    t_low, t_high = DescrStatsW(rates[:, 0]).tconfint_mean(alpha=0.05)
    assert low[0] == pytest.approx(t_low, abs=0.004) and high[0] == pytest.approx(t_high, abs=0.004)


def test_no_bootstrap_interval_below_two_tasks() -> None:
    values = np.array([[0.5, np.nan], [0.0, 1.0]])
    low, high = bootstrap_ci95(values, groups=np.array([0, 1]))
    assert low[0] <= high[0] and not math.isnan(low[0])
    assert math.isnan(low[1]) and math.isnan(high[1])  # one task counts for column 2
    one_low, one_high = bootstrap_ci95(np.array([[0.5]]))
    assert math.isnan(one_low[0]) and math.isnan(one_high[0])


def _groups(rng: np.random.Generator, tasks: int, equal: bool) -> list[np.ndarray]:
    sizes = np.full(tasks, 5) if equal else rng.integers(1, 9, size=tasks)
    rates = rng.beta(1.5, 1.5, size=tasks)
    return [rng.binomial(1, r, size=s).astype(float) for r, s in zip(rates, sizes, strict=True)]


def _components(groups: list[np.ndarray]) -> dict:
    n = np.array([len(g) for g in groups])
    return variance_components(
        n, np.array([g.sum() for g in groups]), np.array([(g**2).sum() for g in groups])
    )


@pytest.mark.parametrize("equal", [True, False])
def test_icc_is_the_one_way_anova_estimator(equal: bool) -> None:
    rng = np.random.default_rng(4 + equal)
    groups = _groups(rng, 40, equal)
    got = _components(groups)
    frame = pd.DataFrame(
        {"y": np.concatenate(groups), "task": np.repeat(np.arange(40), [len(g) for g in groups])}
    )
    table = anova_lm(smf.ols("y ~ C(task)", data=frame).fit())
    msb, msw = table["mean_sq"].iloc[0], table["mean_sq"].iloc[1]
    sizes = np.array([len(g) for g in groups])
    n0 = (sizes.sum() - (sizes**2).sum() / sizes.sum()) / 39
    assert got["within"] == pytest.approx(msw, rel=1e-10)
    assert got["between"] == pytest.approx((msb - msw) / n0, rel=1e-10)
    assert got["repeats_per_task"] == pytest.approx(n0)
    f = sps.f_oneway(*groups).statistic
    assert got["icc"] == pytest.approx((f - 1) / (f + n0 - 1), rel=1e-10)


def test_icc_is_near_zero_when_tasks_do_not_differ() -> None:
    # Every task has the same 50% pass rate: the true ICC is 0. The plug-in share
    # var(task means) / total carries within / repeats of noise and reads about 1 / repeats.
    rng = np.random.default_rng(6)
    iccs = [
        _components([rng.binomial(1, 0.5, size=4).astype(float) for _ in range(100)])["icc"]
        for _ in range(200)
    ]
    assert abs(float(np.mean(iccs))) < 0.02


def test_icc_is_none_with_a_reason_when_undefined() -> None:
    one_repeat = variance_components(np.array([1, 1, 1]), np.array([1, 0, 1]), np.array([1, 0, 1]))
    assert one_repeat["icc"] is None and "one repeat" in one_repeat["reason"]
    one_task = variance_components(np.array([4]), np.array([2]), np.array([2]))
    assert one_task["icc"] is None and "two tasks" in one_task["reason"]
    flat = variance_components(np.array([3, 3]), np.array([3, 3]), np.array([3, 3]))
    assert flat["icc"] is None and "no variation" in flat["reason"]
    assert design_effect(None, np.array([3, 3])) is None


def test_design_effect_follows_the_icc() -> None:
    assert design_effect(0.3, np.full(10, 5)) == pytest.approx(1 + 4 * 0.3)  # Kish
    # A negative ICC estimate reads as 0: never below independent rollouts (issue 30).
    assert design_effect(-0.2, np.full(10, 5)) == pytest.approx(1.0)
    assert design_effect(-0.9, np.array([1, 2, 8])) >= 1.0
    # Unequal repeats: Var(mean of task means) / (sigma^2 / N), by simulation of the model.
    rng = np.random.default_rng(7)
    sizes = np.array([1, 2, 4, 8] * 5)
    between, within = 0.04, 0.16
    effects = rng.normal(0, math.sqrt(between), size=(20_000, len(sizes)))
    means = np.stack(
        [
            e + rng.normal(0, math.sqrt(within / s), size=20_000)
            for e, s in zip(effects.T, sizes, strict=True)
        ],
        axis=1,
    ).mean(axis=1)
    expected = means.var() / ((between + within) / sizes.sum())
    assert design_effect(between / (between + within), sizes) == pytest.approx(expected, rel=0.05)


def test_mcnemar_matches_statsmodels() -> None:
    for b in range(0, 40, 3):
        for c in range(0, 40, 4):
            ours = mcnemar(b, c)
            exact = b + c < 25
            theirs = sm_mcnemar([[0, b], [c, 0]], exact=exact, correction=True)
            assert ours["p_value"] == pytest.approx(theirs.pvalue, rel=1e-10, abs=1e-15), (b, c)
            assert ours["method"] == (
                "exact binomial" if exact else "chi-square, continuity corrected"
            )
    # The label states the switch where the code makes it: 25 discordant tasks use chi-square.
    assert mcnemar(12, 13)["method"] == "chi-square, continuity corrected"
    assert mcnemar(12, 12)["method"] == "exact binomial"
    assert "below 25 discordant tasks" in MCNEMAR_TEST and "from 25" in MCNEMAR_TEST


def test_binomial_cdf_matches_scipy() -> None:
    for n, p in [(50, 0.02), (10, 0.1), (3000, 0.001), (2000, 0.6), (7, 0.0), (7, 1.0)]:
        k = np.arange(-1, n + 2)
        got = binomial_cdf(k, np.full(len(k), n), p)
        np.testing.assert_allclose(got, sps.binom.cdf(k, n, p), rtol=0, atol=1e-10)


def _enumerated_power(tasks: int, p10: float, p01: float) -> float:
    """Power by enumerating every (b, c) outcome with scipy's multinomial, and deciding each
    with statsmodels' McNemar test (exact below 25 discordant, corrected chi-square above)."""
    power = 0.0
    for b in range(tasks + 1):
        for c in range(tasks + 1 - b):
            if b + c == 0:
                continue
            test = sm_mcnemar([[0, b], [c, 0]], exact=b + c < 25, correction=True)
            if test.pvalue <= 0.05:
                power += sps.multinomial.pmf(
                    [b, c, tasks - b - c], tasks, [p10, p01, 1 - p10 - p01]
                )
    return power


@pytest.mark.parametrize(
    ("tasks", "p10", "p01"), [(30, 0.25, 0.05), (60, 0.4, 0.2), (45, 0.1, 0.1)]
)
def test_mcnemar_power_is_the_power_of_the_reported_test(
    tasks: int, p10: float, p01: float
) -> None:
    expected = _enumerated_power(tasks, p10, p01)
    assert mcnemar_power(tasks, p10 + p01, p10 - p01) == pytest.approx(expected, abs=1e-10)


def test_detectable_difference_and_tasks_needed_hit_80_percent() -> None:
    detectable, reason = mcnemar_detectable(200, 0.3)
    assert reason is None
    assert mcnemar_power(200, 0.3, detectable) >= 0.8 > mcnemar_power(200, 0.3, detectable - 1e-3)
    needed, reason = mcnemar_tasks_needed(0.3, 0.1)
    assert reason is None
    assert mcnemar_power(needed, 0.3, 0.1) >= 0.8 > mcnemar_power(needed - 1, 0.3, 0.1)
    # Connor's (1987) normal-approximation sample size has no continuity correction, so it
    # is a little below the corrected test's: within 10%.
    z80 = sps.norm.ppf(0.8)
    connor = (Z95 * math.sqrt(0.3) + z80 * math.sqrt(0.3 - 0.1**2)) ** 2 / 0.1**2
    assert connor <= needed <= 1.1 * connor


def test_power_figures_say_when_they_are_undefined() -> None:
    assert mcnemar_detectable(50, 0.0)[1].startswith("no task is solved by only one run")
    assert "even if every discordant task" in mcnemar_detectable(5, 0.2)[1]
    assert "needs at least" in mcnemar_tasks_needed(0.02, 0.05)[1]
    summary = mcnemar_power_summary(100, 20, 0.05)
    assert summary.test.startswith("McNemar's test")
    assert summary.discordant_share == 0.2
    assert summary.power_now == pytest.approx(mcnemar_power(100, 0.2, 0.05))
