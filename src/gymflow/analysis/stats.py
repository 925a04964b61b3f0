"""Task-clustered standard errors and confidence intervals, the bootstrap over tasks, variance
components, and the paired test of a comparison with its power.

Everything here is plain arithmetic on numbers the store already summarises; the Student t and
binomial distributions are computed here (not with scipy, a test-only dependency) and the tests
check them against scipy and statsmodels."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

Z95 = 1.959963984540054

#: two-sided level of every interval and test reported
ALPHA = 0.05

CI_METHOD = (
    "Wilson score interval on the task-clustered effective sample size (Kish: the number of "
    "independent rollouts that would give the same standard error), with the Student t "
    "quantile at tasks - 1 degrees of freedom; it stays inside the reward range"
)


def clustered_stderr(task_means: Sequence[float]) -> float:
    """Average the repeats within each task first, then the CLT standard error over tasks.

    Treating repeats as independent samples would understate the error: repeats of one task are
    correlated, and the task is the unit we sample from the population of tasks."""
    t = len(task_means)
    if t < 2:
        return float("nan")
    mean = sum(task_means) / t
    variance = sum((m - mean) ** 2 for m in task_means) / (t - 1)
    return math.sqrt(variance / t)


# --- Student t ---------------------------------------------------------------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for numerator in (
            m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def _stirling_tail(x: float) -> float:
    """log Gamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2), for x >= 100 (error below 1e-20)."""
    return 1 / (12 * x) - 1 / (360 * x**3) + 1 / (1260 * x**5) - 1 / (1680 * x**7)


def _log_gamma_ratio(a: float, b: float) -> float:
    """log Gamma(a + b) - log Gamma(a). For large a, lgamma's two large values cancel to the
    small difference and lose digits (1e-9 at a million tasks); Stirling's series keeps them."""
    if a < 100:
        return math.lgamma(a + b) - math.lgamma(a)
    return (
        b * math.log(a)
        + ((a + b - 0.5) * math.log1p(b / a) - b)
        + _stirling_tail(a + b)
        - _stirling_tail(a)
    )


def _beta_regularised(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        _log_gamma_ratio(a, b) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
        if a >= b
        else _log_gamma_ratio(b, a) - math.lgamma(a) + a * math.log(x) + b * math.log1p(-x)
    )
    # The fraction converges fast below the beta's mean; above it, use I_x(a, b) = 1 - I_1-x(b, a).
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom, t >= 0."""
    return 0.5 * _beta_regularised(df / 2.0, 0.5, df / (df + t * t))


@lru_cache(maxsize=4096)
def t_quantile(probability: float, df: int) -> float:
    """The `probability` quantile (above 0.5) of Student's t with `df` >= 1 degrees of freedom,
    by bisection on the upper tail (monotone, so it cannot miss)."""
    if not 0.5 < probability < 1.0 or df < 1:
        raise ValueError(
            f"t quantile needs 0.5 < probability < 1 and df >= 1 (got {probability}, {df})"
        )
    tail = 1.0 - probability
    low, high = 0.0, 1.0
    while t_upper_tail(high, df) > tail:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = 0.5 * (low + high)
        if t_upper_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-15 * high:
            break
    return 0.5 * (low + high)


# --- intervals ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interval:
    """A 95% interval, or None with the reason it is undefined."""

    bounds: tuple[float, float] | None
    reason: str | None = None

    def as_list(self) -> list[float] | None:
        return None if self.bounds is None else [self.bounds[0], self.bounds[1]]


def bounded_mean_ci95(
    mean: float,
    stderr: float,
    *,
    tasks: int,
    rollouts: int,
    low: float = 0.0,
    high: float = 1.0,
) -> Interval:
    """A 95% CI for a mean over tasks of values in [low, high] (pass rates, rewards).

    The symmetric mean +- t * SE interval reaches past 0 and 1 on small or lopsided runs, and
    clipping it would only hide that its coverage is off there. Instead this is the Wilson score
    interval, whose bounds are the roots of |p - mean| = q * sqrt(p(1 - p) / n) and so always lie
    in the range, evaluated at the clustered effective sample size n = mean(1 - mean) / SE^2
    (on the rescaled [0, 1] range) and with q the t quantile at tasks - 1 degrees of freedom, as
    survey statisticians do for clustered proportions (Korn & Graubard 1998; Dean & Pagano 2015).
    For large runs it equals mean +- t * SE. `n` is at most the number of rollouts (a design
    effect below 1 is not trusted); when the tasks show no spread (every task at the same rate, or
    the mean at a bound) the data give no design effect and n falls back to the number of tasks,
    the conservative end. Undefined (None) below two tasks: the spread between tasks, which is
    the error, cannot be seen in one."""
    if tasks < 2:
        return Interval(None, "one task: the spread between tasks, the error, is not observable")
    width = high - low
    if not width > 0 or math.isnan(mean) or math.isnan(stderr):
        return Interval(None, "the reward range is empty")
    p = min(max((mean - low) / width, 0.0), 1.0)
    se = stderr / width
    spread = p * (1.0 - p)
    n = min(spread / se**2, float(rollouts)) if spread > 0 and se > 0 else float(tasks)
    q = t_quantile(1.0 - ALPHA / 2, tasks - 1)
    q2n = q * q / n
    centre = (p + q2n / 2.0) / (1.0 + q2n)
    half = q * math.sqrt(spread / n + q2n / (4.0 * n)) / (1.0 + q2n)
    lower, upper = max(centre - half, 0.0), min(centre + half, 1.0)
    return Interval((low + width * lower, low + width * upper))


def t_interval(
    mean: float, stderr: float, tasks: int, *, alpha: float = ALPHA, limit: float = 1.0
) -> Interval:
    """mean +- t(1 - alpha / 2, tasks - 1) * stderr, kept inside [-limit, limit] (a difference of
    two pass rates cannot leave [-1, 1]). A smaller `alpha` gives the wider intervals that hold
    simultaneously over several comparisons (Bonferroni: alpha / comparisons each)."""
    if tasks < 2:
        return Interval(None, "one task: the spread between tasks, the error, is not observable")
    half = t_quantile(1.0 - alpha / 2, tasks - 1) * stderr
    return Interval((max(mean - half, -limit), min(mean + half, limit)))


def _noncentral_t_above(critical: float, df: int, shift: float) -> float:
    """P(T' > critical) for the noncentral t with `df` degrees of freedom and noncentrality
    `shift`: T' = (Z + shift) / (W / sqrt(df)) with W chi-distributed, so the probability is
    the integral of P(Z > critical * w / sqrt(df) - shift) against W's density, summed on a
    grid of 4,001 points over the 12 standard deviations around W's mode (W's sd is below
    0.71 for every df)."""
    centre = math.sqrt(max(df - 1, 0))
    w = np.linspace(max(centre - 12.0, 0.0), centre + 12.0, 4001)
    with np.errstate(divide="ignore"):
        power_term = (df - 1) * np.log(w) if df > 1 else np.zeros_like(w)  # 0 * log 0 is 0
    log_density = power_term - w * w / 2 - (df / 2 - 1) * math.log(2) - math.lgamma(df / 2)
    tail = [0.5 * math.erfc((critical * x / math.sqrt(df) - shift) / math.sqrt(2)) for x in w]
    return float(np.trapezoid(np.asarray(tail) * np.exp(log_density), w))


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
        _noncentral_t_above(critical, tasks - 1, shift)
        + _noncentral_t_above(critical, tasks - 1, -shift),
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


def bootstrap_ci95(
    values: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    samples: int = 1000,
    seed: int = 0,
    chunk: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """Expanded-percentile 95% CIs of column means over tasks, resampling tasks with replacement.

    The plain 2.5/97.5 percentiles are too narrow on few tasks (a resample's spread is the
    plug-in one, which divides by tasks instead of tasks - 1, and they use normal tails): they
    covered 83-92% at 10 tasks. Hesterberg's expanded percentile interval (2015) reads the
    percentiles at alpha'/2 and 1 - alpha'/2 instead, where Phi^-1(alpha'/2) =
    -sqrt(m / (m - 1)) * t(0.975, m - 1) for the m tasks a column counts.

    `values` holds one row per distinct task profile and `groups[i]` is task i's row (tasks with
    equal (n, c) share a row, so a resample is a count per row and the cost follows the number of
    distinct rows, not tasks); without `groups`, each row is one task. NaN marks a task that does
    not count for a column (pass@k with fewer than k scored rollouts); each resample averages
    the tasks that count. A column with fewer than two tasks that count gets NaN: resampling one
    task gives a zero-width interval that claims a certainty the data do not have.
    Seeded: the same input and seed give the same interval everywhere."""
    rows, columns = values.shape
    groups = np.arange(rows) if groups is None else groups
    tasks = len(groups)
    if tasks == 0:
        nan = np.full(columns, np.nan)
        return nan, nan.copy()
    rng = np.random.default_rng(seed)
    counts = ~np.isnan(values)
    filled = np.where(counts, values, 0.0)
    counts = counts.astype(float)
    means = np.empty((samples, columns))
    for start in range(0, samples, chunk):
        size = min(chunk, samples - start)
        drawn = groups[rng.integers(0, tasks, size=(size, tasks))]
        # How often each row was drawn in each resample: one bincount over offset draws.
        offsets = drawn + np.arange(size)[:, None] * rows
        weights = np.bincount(offsets.ravel(), minlength=size * rows).reshape(size, rows)
        weights = weights.astype(float)  # float @ float runs in BLAS; int @ float does not
        with np.errstate(invalid="ignore", divide="ignore"):
            means[start : start + size] = (weights @ filled) / (weights @ counts)
    low, high = np.full(columns, np.nan), np.full(columns, np.nan)
    for column, tasks_counted in enumerate(counts[groups].sum(axis=0).astype(int).tolist()):
        if tasks_counted < 2:
            continue
        tail = _expanded_tail(tasks_counted)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no resample filled it: NaN
            low[column], high[column] = np.nanpercentile(
                means[:, column], [100 * tail, 100 * (1 - tail)]
            )
    return low, high


BAND_METHOD = (
    "expanded-percentile bootstrap over tasks, widened to at least the Wilson-t interval on the "
    "task-clustered effective sample size (pass@1's method): a bootstrap of tasks that all "
    "agree has zero width"
)


def widened_band(
    low: float, high: float, values: np.ndarray, *, independent: int
) -> tuple[float, float] | None:
    """The union of a bootstrap band [low, high] and `bounded_mean_ci95` on the per-task
    `values` it resamples (NaN: a task that does not count), with `independent` the most
    independent outcomes they can rest on (for pass@k, the disjoint k-subsets of the tasks'
    rollouts). A percentile bootstrap cannot be wider than the spread it resamples: when every
    task has the same value (all pass at the ceiling) it is a point, while the Wilson interval
    falls back to the number of tasks. None below two tasks that count."""
    counted = values[~np.isnan(values)]
    if len(counted) < 2 or math.isnan(low):
        return None
    interval = bounded_mean_ci95(
        float(counted.mean()),
        clustered_stderr(counted.tolist()),
        tasks=len(counted),
        rollouts=max(independent, len(counted)),
    ).bounds
    assert interval is not None  # two tasks or more, values in [0, 1]
    return min(low, interval[0]), max(high, interval[1])


def _expanded_tail(tasks: int) -> float:
    """alpha'/2 of the expanded percentile interval: the normal tail beyond
    sqrt(tasks / (tasks - 1)) * t(0.975, tasks - 1)."""
    return 0.5 * math.erfc(
        math.sqrt(tasks / (tasks - 1)) * t_quantile(0.975, tasks - 1) / math.sqrt(2)
    )


# --- variance components -----------------------------------------------------------------------


def variance_components(
    n: np.ndarray, sums: np.ndarray, squares: np.ndarray
) -> dict[str, float | str | None]:
    """Between-task and within-task variance of outcomes, and the intra-task correlation ICC(1),
    from the one-way random-effects ANOVA over tasks (the per-task count n, sum and sum of
    squares of the outcomes suffice; for a pass, the sum of squares is the sum).

    With a tasks, N outcomes, MSB and MSW the between- and within-task mean squares and
    n0 = (N - sum(n_i^2) / N) / (a - 1) the effective repeats per task (the mean when repeats are
    equal): within = MSW, between = (MSB - MSW) / n0, icc = between / (between + within).
    Unlike the plug-in share var(task means) / total, which carries within / repeats of noise
    into the between part, this is unbiased for the variance components with unequal repeats
    too. It can come out slightly negative when tasks differ less than their repeats make them
    look: read that as 0. None, with `reason`, when undefined: one task, one repeat per task
    (within cannot be told from between), or no variation at all."""
    n = np.asarray(n, dtype=float)
    sums = np.asarray(sums, dtype=float)
    squares = np.asarray(squares, dtype=float)
    tasks, total_n = len(n), float(n.sum())
    undefined = {"between": None, "within": None, "total": None, "icc": None}
    if tasks < 2:
        return {**undefined, "repeats_per_task": None, "reason": "fewer than two tasks"}
    if total_n - tasks < 1:
        return {
            **undefined,
            "repeats_per_task": 1.0,
            "reason": "one repeat per task: within-task variance cannot be told from between",
        }
    # Per-task sums of squares about the task mean; rounding can leave a tiny negative.
    within_ss = float(np.maximum(squares - sums**2 / n, 0.0).sum())
    between_ss = float((sums**2 / n).sum() - sums.sum() ** 2 / total_n)
    msb = max(between_ss, 0.0) / (tasks - 1)
    msw = within_ss / (total_n - tasks)
    n0 = (total_n - float((n**2).sum()) / total_n) / (tasks - 1)
    between = (msb - msw) / n0
    if not between + msw > 0:
        return {**undefined, "repeats_per_task": n0, "reason": "no variation in outcomes"}
    return {
        "between": between,
        "within": msw,
        "total": between + msw,
        "icc": between / (between + msw),
        "repeats_per_task": n0,
        "reason": None,
    }


def design_effect(icc: float | None, n: np.ndarray) -> float | None:
    """Var(pass@1) over the variance of a mean of as many independent rollouts, implied by ICC.

    pass@1 weights tasks equally, so with sigma^2 the total variance its variance is
    sigma^2 / a * (icc + (1 - icc) * mean(1 / n_i)) over a tasks; the independent-rollout mean's
    is sigma^2 / N. Their ratio is (N / a) * (icc + (1 - icc) * mean(1 / n_i)), which is Kish's
    1 + (m - 1) * icc when every task has m repeats.

    A negative ICC estimate (tasks differing less than their repeats make them look) is read as
    0: repeats of a task cannot be less alike than rollouts of different tasks in the population
    the estimate is for, so the design effect is never below that of independent rollouts."""
    if icc is None or len(n) == 0:
        return None
    icc = max(icc, 0.0)
    n = np.asarray(n, dtype=float)
    return float(n.sum() / len(n) * (icc + (1.0 - icc) * float(np.mean(1.0 / n))))


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


_log_factorials = np.zeros(1)


def _log_factorial(upto: int) -> np.ndarray:
    global _log_factorials
    if len(_log_factorials) <= upto:
        size = max(upto + 1, 2 * len(_log_factorials))
        _log_factorials = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, size)))])
    return _log_factorials


#: a binomial's mass further than this many standard deviations (plus one) from its mean is
#: negligible: below 1e-12 even for a Poisson-like binomial of mean 1, far less when larger
_SPAN = 12.0


def _binomial_cdf(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    """P(X_i <= k_i) for X_i ~ Binomial(n_i, p), elementwise, summing only the terms within
    `_SPAN` standard deviations of the mean (the rest is negligible)."""
    if p <= 0.0:
        return (k >= 0).astype(float)
    if p >= 1.0:
        return (k >= n).astype(float)
    mean, sd = n * p, np.sqrt(n * p * (1.0 - p))
    start = np.maximum(np.floor(mean - _SPAN * sd - 1), 0).astype(np.int64)
    stop = np.minimum(k, np.ceil(mean + _SPAN * sd + 1)).astype(np.int64)
    b = start[:, None] + np.arange(max(int((stop - start).max(initial=0)), 0) + 1)[None, :]
    inside = b <= stop[:, None]
    b = np.where(inside, b, 0)
    lf = _log_factorial(int(n.max(initial=0)))
    nn = n[:, None]
    log_pmf = (
        lf[nn] - lf[b] - lf[np.maximum(nn - b, 0)] + b * math.log(p) + (nn - b) * math.log1p(-p)
    )
    cdf = np.where(inside, np.exp(log_pmf), 0.0).sum(axis=1)
    cdf[k > mean + _SPAN * sd + 1] = 1.0
    cdf[k >= n] = 1.0
    cdf[k < 0] = 0.0
    return cdf


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
        mean, sd = tasks * discordant, math.sqrt(tasks * discordant * (1.0 - discordant))
        ds = np.arange(
            max(1, math.floor(mean - _SPAN * sd - 1)),
            min(tasks, math.ceil(mean + _SPAN * sd + 1)) + 1,
        )
        lf = _log_factorial(tasks)
        weights = np.exp(
            lf[tasks]
            - lf[ds]
            - lf[tasks - ds]
            + ds * math.log(discordant)
            + (tasks - ds) * math.log1p(-discordant)
        )
    critical = np.array([_critical(d) for d in ds.tolist()])
    rejected = _binomial_cdf(critical, ds, pi) + _binomial_cdf(critical, ds, 1.0 - pi)
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
class Power:
    """McNemar power figures of a comparison; every figure names the test it is for."""

    test: str
    power: float
    tasks_now: int
    discordant_share: float
    minimum_detectable_difference: float | None
    minimum_detectable_difference_reason: str | None
    difference: float
    power_now: float | None
    tasks_needed: int | None
    tasks_needed_reason: str | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


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
class PairedPower:
    """Power figures of the paired t test on pass-rate differences (`paired_t`), the test whose
    difference, CI and p-value a comparison shows; every figure names the test it is for."""

    test: str
    power: float
    tasks_now: int
    #: the standard deviation of per-task differences assumed (this comparison's, floored)
    sd_differences: float | None
    minimum_detectable_difference: float | None
    minimum_detectable_difference_reason: str | None
    difference: float
    power_now: float | None
    tasks_needed: int | None
    tasks_needed_reason: str | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


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
            PAIRED_TEST, POWER, tasks, None, None, reason, difference, None, None, reason
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
