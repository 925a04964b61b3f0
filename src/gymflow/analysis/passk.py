"""The unbiased pass@k and pass^k estimators (Chen et al. 2021), per task.

pass@k = 1 - C(n-c, k)/C(n, k) is computed as 1 - prod(1 - k/i, i = n-c+1..n), which never forms
the huge binomials; pass^k = C(c, k)/C(n, k) = prod((c-j)/(n-j), j = 0..k-1)."""

from __future__ import annotations

import numpy as np


def _curves(n: int, c: int, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pass@k and pass^k of one (n, c) for every k in `ks` at once (NaN where k > n)."""
    k = ks.astype(float)
    if c == 0:
        at, hat = np.zeros(len(ks)), np.zeros(len(ks))
    else:
        i = np.arange(n - c + 1, n + 1, dtype=float)
        at = 1.0 - np.prod(1.0 - k[:, None] / i[None, :], axis=1)
        at[ks > n - c] = 1.0
        j = np.arange(n, dtype=float)
        hat_by_k = np.maximum(np.cumprod((c - j) / (n - j)), 0.0)
        hat = hat_by_k[np.minimum(ks, n) - 1]
    too_big = ks > n
    at[too_big], hat[too_big] = np.nan, np.nan
    return at, hat


def pair_curves(
    n: np.ndarray, c: np.ndarray, ks: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pass@k and pass^k per distinct (n, c): (at_table, hat_table, group) where the tables are
    pairs x ks (NaN where k > n) and `group[i]` is task i's row in them. The cost follows the
    number of distinct pairs (at most about repeats^2 / 2), not the number of tasks."""
    if len(n) == 0:
        empty = np.zeros((0, len(ks)))
        return empty, empty.copy(), np.zeros(0, dtype=np.int64)
    pairs, group = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    at_table = np.empty((len(pairs), len(ks)))
    hat_table = np.empty((len(pairs), len(ks)))
    for row, (pair_n, pair_c) in enumerate(pairs):
        if pair_n == 0:
            at_table[row], hat_table[row] = np.nan, np.nan
        else:
            at_table[row], hat_table[row] = _curves(int(pair_n), int(pair_c), ks)
    return at_table, hat_table, group.reshape(-1)


def per_task_curves(n: np.ndarray, c: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tasks x ks matrices of pass@k and pass^k (NaN where a task has fewer than k scored
    rollouts)."""
    at_table, hat_table, group = pair_curves(n, c, ks)
    return at_table[group], hat_table[group]
