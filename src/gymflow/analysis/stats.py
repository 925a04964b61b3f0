"""Task-clustered standard errors, bootstrap and confidence intervals, variance components, and the
paired tests of a comparison."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054


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


def ci95(mean: float, stderr: float) -> tuple[float, float]:
    if math.isnan(stderr):
        return (float("nan"), float("nan"))
    return (mean - Z95 * stderr, mean + Z95 * stderr)


#: z for 80% power (one-sided quantile 0.8 of the standard normal)
Z80 = 0.8416212335729143


def bootstrap_ci95(
    values: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    samples: int = 1000,
    seed: int = 0,
    chunk: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile 95% CIs of column means over tasks, resampling tasks with replacement.

    `values` holds one row per distinct task profile and `groups[i]` is task i's row (tasks with
    equal (n, c) share a row, so a resample is a count per row and the cost follows the number of
    distinct rows, not tasks); without `groups`, each row is one task. NaN marks a task that does
    not count for a column (pass@k with fewer than k scored rollouts); each resample averages
    the tasks that count. Seeded: the same input and seed give the same interval everywhere."""
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column no resample can fill: NaN
        low, high = np.nanpercentile(means, [2.5, 97.5], axis=0)
    return low, high


def variance_components(task_means: np.ndarray, within: np.ndarray) -> dict[str, float | None]:
    """Split outcome variance into between-task and within-task parts.

    between = population variance of the task means; within = mean over tasks of each task's own
    (population) variance across its repeats. With equal repeats per task they add up to the
    variance of all outcomes pooled. `icc` is the between share: near 1, repeats of a task agree
    and more tasks (not more repeats) narrow the CI; near 0, repeats disagree."""
    if len(task_means) == 0:
        return {"between": None, "within": None, "total": None, "icc": None}
    between = float(np.var(task_means))
    within_mean = float(np.mean(within))
    total = between + within_mean
    return {
        "between": between,
        "within": within_mean,
        "total": total,
        "icc": between / total if total > 0 else None,
    }


def mcnemar(b: int, c: int) -> dict[str, float | int | str]:
    """McNemar's test on the discordant pairs b (A pass, B fail) and c (A fail, B pass).

    Exact two-sided binomial test when b + c < 25, else the chi-square with continuity
    correction (1 degree of freedom)."""
    discordant = b + c
    if discordant == 0:
        return {"b": b, "c": c, "method": "exact binomial", "statistic": 0.0, "p_value": 1.0}
    if discordant < 25:
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


def tasks_for_power(mean_difference: float, sd_difference: float) -> int | None:
    """Paired tasks needed to detect `mean_difference` at two-sided alpha 0.05 with 80% power:
    n = ((z_0.975 + z_0.8) * sd / difference)^2, rounded up. None when the difference is 0."""
    if mean_difference == 0 or math.isnan(sd_difference) or math.isnan(mean_difference):
        return None
    return math.ceil(((Z95 + Z80) * sd_difference / abs(mean_difference)) ** 2)
