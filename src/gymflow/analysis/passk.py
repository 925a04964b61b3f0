"""The unbiased pass@k and pass^k estimators (Chen et al. 2021), per task."""

from __future__ import annotations

from math import prod


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n passes), c of n passing.

    Computed as 1 - prod(1 - k/i, i = n-c+1..n), which equals 1 - C(n-c, k)/C(n, k) without
    forming the huge binomials."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """P(all k samples pass) = C(c, k)/C(n, k) = prod((c-j)/(n-j), j = 0..k-1)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if c < k:
        return 0.0
    return prod((c - j) / (n - j) for j in range(k))
