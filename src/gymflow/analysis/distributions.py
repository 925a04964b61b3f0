"""The Student t, noncentral t and binomial distributions the intervals, tests and power
figures use: computed here rather than with scipy (a test-only dependency); the tests check them
against scipy."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


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


def noncentral_t_above(critical: float, df: int, shift: float) -> float:
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
    # numpy has no erfc: the arguments are computed as arrays (the same operations in the same
    # order as per element, so the same bits) and only erfc runs per point, which keeps the
    # comparison's power figures, thousands of these integrals, from costing seconds
    arguments = (critical * w / math.sqrt(df) - shift) / math.sqrt(2)
    tail = 0.5 * np.fromiter(map(math.erfc, arguments.tolist()), float, len(w))
    return float(np.trapezoid(tail * np.exp(log_density), w))


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


def binomial_window(n: int, p: float) -> tuple[int, int]:
    """The counts of a Binomial(n, p) within `_SPAN` standard deviations (plus one) of its
    mean, as (lowest, highest): outside them the mass is negligible."""
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    return max(0, math.floor(mean - _SPAN * sd - 1)), min(n, math.ceil(mean + _SPAN * sd + 1))


def binomial_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
    """P(X = k_i) for X ~ Binomial(n, p), 0 < p < 1, elementwise over counts 0 <= k_i <= n."""
    lf = _log_factorial(n)
    return np.exp(lf[n] - lf[k] - lf[n - k] + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_cdf(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
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
