"""A comparison's paired tests, on the tasks two runs share: the paired t test on per-task
pass-rate differences and McNemar's test on majority verdicts, each with its power, the smallest
difference it detects and the tasks it would need."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from gymflow.analysis.distributions import (
    binomial_cdf,
    binomial_pmf,
    binomial_window,
    noncentral_t_above,
    t_quantile,
    t_upper_tail,
)
from gymflow.analysis.stats import ALPHA, Z95, Interval, t_interval

PAIRED_TEST = (
    "paired t test on per-task pass-rate differences (t at tasks - 1 degrees of freedom, "
    "two-sided alpha 0.05), their spread taken as at least that of one task flipping "
    "completely: the difference, its CI, its p-value and its power all come from this test"
)


@dataclass(frozen=True, slots=True)
class PairedTest:
    """The paired t test of a mean of per-task differences: everything a verdict shows."""

    tasks: int
    difference: float | None
    #: the standard deviation of the per-task differences the test uses (with the floor)
    sd: float | None
    stderr: float | None
    p_value: float | None
    interval: Interval


def paired_t(differences: np.ndarray, *, limit: float = 1.0) -> PairedTest:
    """The paired t test on per-task differences in [-limit, limit].

    The sample's sum of squared deviations is taken as at least (tasks - 1) / tasks * limit^2,
    what it is when one task moved by the whole range and every other agreed: when every task
    agrees (near the ceiling, most tasks pass in both runs) the plain t interval is [0, 0] and
    its p-value undefined, a certainty no finite sample has. With that floor the standard error
    is at least limit / tasks, and the interval covers at the ceiling too (bench/ci_coverage.py);
    away from it the floor does not bind and this is the textbook paired t."""
    tasks = len(differences)
    if tasks == 0:
        return PairedTest(0, None, None, None, None, Interval(None, "no task is paired"))
    mean = float(differences.mean())
    if tasks < 2:
        return PairedTest(tasks, mean, None, None, None, t_interval(mean, math.nan, tasks))
    squares = float(((differences - mean) ** 2).sum())
    sd = math.sqrt(max(squares, (tasks - 1) / tasks * limit * limit) / (tasks - 1))
    se = sd / math.sqrt(tasks)
    p_value = min(1.0, 2.0 * t_upper_tail(abs(mean) / se, tasks - 1))
    return PairedTest(tasks, mean, sd, se, p_value, t_interval(mean, se, tasks, limit=limit))


def paired_t_power(tasks: int, sd: float, difference: float, *, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t test on `tasks` tasks whose differences have standard
    deviation `sd`, when the true mean difference is `difference`: P(|T'| > t_crit) for T'
    the noncentral t with noncentrality difference / SE."""
    if tasks < 2 or not sd > 0:
        return 0.0
    shift = abs(difference) / (sd / math.sqrt(tasks))
    critical = t_quantile(1.0 - alpha / 2, tasks - 1)
    return min(
        noncentral_t_above(critical, tasks - 1, shift)
        + noncentral_t_above(critical, tasks - 1, -shift),
        1.0,
    )


def _bisect_difference(tasks: int, sd: float, high: float) -> float | None:
    """The smallest difference in (0, high] the paired t detects with POWER; None if none."""
    if paired_t_power(tasks, sd, high) < POWER:
        return None
    low = 0.0
    while high - low > 1e-5:
        middle = 0.5 * (low + high)
        if paired_t_power(tasks, sd, middle) >= POWER:
            high = middle
        else:
            low = middle
    return high


def _bisect_tasks(sd: float, difference: float) -> int | None:
    """The fewest tasks at which the paired t detects `difference` with POWER (None: more than
    MAX_TASKS), assuming the spread of differences stays `sd`."""
    low, high = 1, 2
    while paired_t_power(high, sd, difference) < POWER:
        if high >= MAX_TASKS:
            return None
        low, high = high, min(2 * high, MAX_TASKS)
    while high - low > 1:
        middle = (low + high) // 2
        if paired_t_power(middle, sd, difference) >= POWER:
            high = middle
        else:
            low = middle
    return high


# --- McNemar's test and its power --------------------------------------------------------------

#: The discordant count from which `mcnemar` uses the chi-square (below it, the exact test).
CHI_SQUARE_FROM = 25

MCNEMAR_TEST = (
    "McNemar's test on the share of tasks solved by majority verdict, two-sided alpha 0.05 "
    f"(exact binomial below {CHI_SQUARE_FROM} discordant tasks, continuity-corrected chi-square "
    f"from {CHI_SQUARE_FROM})"
)


def mcnemar(b: int, c: int) -> dict[str, float | int | str]:
    """McNemar's test on the discordant pairs b (A pass, B fail) and c (A fail, B pass).

    Exact two-sided binomial test when b + c < CHI_SQUARE_FROM, else the chi-square with
    continuity correction (1 degree of freedom)."""
    discordant = b + c
    if discordant == 0:
        return {"b": b, "c": c, "method": "exact binomial", "statistic": 0.0, "p_value": 1.0}
    if discordant < CHI_SQUARE_FROM:
        tail = sum(math.comb(discordant, i) for i in range(min(b, c) + 1)) / 2**discordant
        return {
            "b": b,
            "c": c,
            "method": "exact binomial",
            "statistic": float(min(b, c)),
            "p_value": min(1.0, 2 * tail),
        }
    statistic = (abs(b - c) - 1) ** 2 / discordant
    return {
        "b": b,
        "c": c,
        "method": "chi-square, continuity corrected",
        "statistic": statistic,
        "p_value": math.erfc(math.sqrt(statistic / 2)),
    }


def _rejects(smaller: int, discordant: int) -> bool:
    return mcnemar(smaller, discordant - smaller)["p_value"] <= ALPHA


@lru_cache(maxsize=200_000)
def _critical(discordant: int) -> int:
    """The largest min(b, c) at which `mcnemar` rejects with b + c = `discordant` (-1: never).
    The p-value rises with min(b, c), so the rejection region is min(b, c) <= this."""
    # The corrected chi-square rejects when (d - 2m - 1)^2 >= z^2 d; start there, then let the
    # test itself settle the boundary so rounding cannot make the two disagree.
    m = -1
    if discordant >= CHI_SQUARE_FROM:
        m = math.floor((discordant - 1 - Z95 * math.sqrt(discordant)) / 2)
    m = min(max(m, -1), (discordant - 1) // 2)
    while m + 1 <= (discordant - 1) // 2 and _rejects(m + 1, discordant):
        m += 1
    while m >= 0 and not _rejects(m, discordant):
        m -= 1
    return m


def mcnemar_power(tasks: int, discordant: float, difference: float) -> float:
    """Power of `mcnemar` as reported (exact below CHI_SQUARE_FROM discordant tasks, corrected
    chi-square from there on, reject at p <= 0.05) on `tasks` paired tasks, when a share
    `discordant` of tasks is solved by exactly one run and A's share solved exceeds B's by
    `difference` (so A alone solves (discordant + difference) / 2 of the tasks).

    Exact: the number of discordant tasks D is Binomial(tasks, discordant) and, given D = d, the
    tasks A alone solves are Binomial(d, pi) with pi = (1 + difference / discordant) / 2; power
    is the sum over d of P(D = d) P(min(B, d - B) <= critical(d))."""
    if tasks < 1 or discordant <= 0.0:
        return 0.0
    difference = abs(difference)
    if difference > discordant + 1e-12:
        raise ValueError(f"a difference of {difference} needs at least that share discordant")
    discordant = min(discordant, 1.0)
    pi = min((1.0 + difference / discordant) / 2.0, 1.0)
    if discordant >= 1.0:
        ds, weights = np.array([tasks]), np.array([1.0])
    else:
        low, high = binomial_window(tasks, discordant)
        ds = np.arange(max(1, low), high + 1)  # no discordant task: nothing to reject on
        weights = binomial_pmf(ds, tasks, discordant)
    critical = np.array([_critical(d) for d in ds.tolist()])
    rejected = binomial_cdf(critical, ds, pi) + binomial_cdf(critical, ds, 1.0 - pi)
    power = float(weights @ np.where(critical >= 0, rejected, 0.0))
    return min(power, 1.0)


#: the power at which the detectable difference and the tasks needed are given
POWER = 0.8
#: the largest number of tasks a tasks-needed figure searches
MAX_TASKS = 100_000


def mcnemar_detectable(tasks: int, discordant: float) -> tuple[float | None, str | None]:
    """The smallest difference in share solved that McNemar's test detects with 80% power on
    `tasks` tasks at discordant share `discordant`; (None, reason) when none can be."""
    if discordant <= 0.0:
        return None, "no task is solved by only one run, so there is no discordance to test"
    if mcnemar_power(tasks, discordant, discordant) < POWER:
        return None, (
            f"even if every discordant task went one way, {tasks} tasks at this discordance "
            "do not reach 80% power"
        )
    low, high = 0.0, discordant
    while high - low > 1e-4:
        middle = 0.5 * (low + high)
        if mcnemar_power(tasks, discordant, middle) >= POWER:
            high = middle
        else:
            low = middle
    return high, None


def mcnemar_tasks_needed(discordant: float, difference: float) -> tuple[int | None, str | None]:
    """The fewest tasks at which McNemar's test detects `difference` with 80% power at
    discordant share `discordant` (bisection on the number of tasks: the exact test's power
    saw-tooths a little, so read it as "about"); (None, reason) when it cannot."""
    difference = abs(difference)
    if difference == 0.0:
        return None, "a difference of 0 cannot be detected"
    if difference > discordant:
        return None, (
            f"a difference of {difference:.1%} needs at least {difference:.1%} of tasks solved "
            f"by one run only; {discordant:.1%} are here"
        )
    low, high = 1, 2
    while mcnemar_power(high, discordant, difference) < POWER:
        if high >= MAX_TASKS:
            return None, f"more than {MAX_TASKS:,} tasks"
        low, high = high, min(2 * high, MAX_TASKS)
    while high - low > 1:
        middle = (low + high) // 2
        if mcnemar_power(middle, discordant, difference) >= POWER:
            high = middle
        else:
            low = middle
    return high, None


@dataclass(frozen=True, slots=True)
class PowerFigures:
    """What a power summary says, whichever test it is for: the test and the power asked of it,
    the tasks compared now, the minimum difference detectable on them (or why none is), the
    difference planned for, the power now at it, and the tasks it needs (or why that cannot be
    said). Each test adds what it assumes."""

    test: str
    power: float
    tasks_now: int
    minimum_detectable_difference: float | None
    minimum_detectable_difference_reason: str | None
    difference: float
    power_now: float | None
    tasks_needed: int | None
    tasks_needed_reason: str | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Power(PowerFigures):
    """McNemar power figures of a comparison, assuming the share of tasks whose verdict
    changed."""

    discordant_share: float


def mcnemar_power_summary(tasks: int, discordant_tasks: int, difference: float) -> Power:
    """Power figures for a comparison on `tasks` tasks of which `discordant_tasks` changed
    verdict: the minimum detectable difference now, and the tasks needed for `difference`. Both
    assume the discordant share observed here, which (unlike the observed difference) a run
    estimates well."""
    share = discordant_tasks / tasks if tasks else 0.0
    detectable, detectable_reason = mcnemar_detectable(tasks, share)
    needed, needed_reason = mcnemar_tasks_needed(share, difference)
    return Power(
        test=MCNEMAR_TEST,
        power=POWER,
        tasks_now=tasks,
        discordant_share=share,
        minimum_detectable_difference=detectable,
        minimum_detectable_difference_reason=detectable_reason,
        difference=difference,
        power_now=mcnemar_power(tasks, share, difference) if 0 < difference <= share else None,
        tasks_needed=needed,
        tasks_needed_reason=needed_reason,
    )


@dataclass(frozen=True, slots=True)
class PairedPower(PowerFigures):
    """Power figures of the paired t test on pass-rate differences (`paired_t`), the test whose
    difference, CI and p-value a comparison shows."""

    #: the standard deviation of per-task differences assumed (this comparison's, floored)
    sd_differences: float | None


def paired_t_power_summary(
    test: PairedTest, difference: float, *, limit: float = 1.0
) -> PairedPower:
    """The minimum difference in pass rate the paired t detects with 80% power on this
    comparison's tasks, and the tasks needed for `difference`; both assume the spread of
    per-task differences observed here (which, unlike the difference, a run estimates well)."""
    difference = abs(difference)
    sd, tasks = test.sd, test.tasks
    if sd is None:
        reason = "fewer than two paired tasks: the spread of differences is not observable"
        return PairedPower(
            test=PAIRED_TEST,
            power=POWER,
            tasks_now=tasks,
            sd_differences=None,
            minimum_detectable_difference=None,
            minimum_detectable_difference_reason=reason,
            difference=difference,
            power_now=None,
            tasks_needed=None,
            tasks_needed_reason=reason,
        )
    detectable = _bisect_difference(tasks, sd, limit)
    needed = _bisect_tasks(sd, difference) if difference > 0 else None
    return PairedPower(
        test=PAIRED_TEST,
        power=POWER,
        tasks_now=tasks,
        sd_differences=sd,
        minimum_detectable_difference=detectable,
        minimum_detectable_difference_reason=None
        if detectable is not None
        else f"{tasks} tasks at this spread of differences do not reach 80% power",
        difference=difference,
        power_now=paired_t_power(tasks, sd, difference) if difference > 0 else None,
        tasks_needed=needed,
        tasks_needed_reason=None
        if needed is not None
        else (
            "a difference of 0 cannot be detected"
            if difference == 0
            else f"more than {MAX_TASKS:,} tasks"
        ),
    )
