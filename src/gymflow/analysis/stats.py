"""Task-clustered standard errors and confidence intervals, the bootstrap over tasks and variance
components of one run (a comparison's paired tests are in `gymflow.analysis.paired`).

Everything here is plain arithmetic on numbers the store already summarises; the tests check it
against scipy and statsmodels."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gymflow.analysis.distributions import t_quantile

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
    values = np.asarray(task_means, dtype=float)
    t = len(values)
    if t < 2:
        return float("nan")
    return math.sqrt(float(values.var(ddof=1)) / t)


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
    # How often each row is drawn when `tasks` tasks are drawn with replacement: multinomial,
    # each row weighted by the tasks it holds. The same distribution as drawing every task and
    # counting (which cost 10^8 draws at 100,000 tasks), at one draw per row and resample.
    shares = np.bincount(groups, minlength=rows) / tasks
    means = np.empty((samples, columns))
    for start in range(0, samples, chunk):
        size = min(chunk, samples - start)
        # float @ float runs in BLAS; int @ float does not
        weights = rng.multinomial(tasks, shares, size=size).astype(float)
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
