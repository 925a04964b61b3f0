"""Task-clustered standard errors and confidence intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
