"""The profile of a run: pass@1 with its task-clustered CI, pass@k and pass^k, and coverage."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gymflow.analysis.outcomes import check_verifier_version, coverage, task_outcomes
from gymflow.analysis.passk import pass_at_k, pass_hat_k
from gymflow.analysis.stats import ci95, clustered_stderr
from gymflow.store.runs import run_info


def _mean_over_tasks(pairs: Counter[tuple[int, int]], k: int, fn) -> float | None:
    """Average fn(n, c, k) over tasks with n >= k; each distinct (n, c) is computed once."""
    total = weight = 0.0
    for (n, c), count in pairs.items():
        if n >= k:
            total += fn(n, c, k) * count
            weight += count
    return total / weight if weight else None


def profile(
    con, *, verifier_version: str | None = None, failures_as_zero: bool = False
) -> dict[str, Any]:
    version = check_verifier_version(con, verifier_version)
    run = run_info(con)
    outcomes = task_outcomes(con, version, failures_as_zero=failures_as_zero)
    scored = [o for o in outcomes if o.n > 0]
    means = [o.c / o.n for o in scored]
    p1 = sum(means) / len(means) if means else None
    se = clustered_stderr(means) if means else None
    pairs = Counter((o.n, o.c) for o in scored)
    ks = range(1, run["repeats"] + 1)
    return {
        "run_id": run["run_id"],
        "benchmark": run["benchmark"],
        "environment": run["environment"],
        "model": run["model"],
        "verifier_version": version,
        "coverage": coverage(con, version).as_dict(),
        "failures": "counted as failures (reward 0)"
        if failures_as_zero
        else "excluded from scores",
        "tasks": len(outcomes),
        "tasks_scored": len(scored),
        "repeats": run["repeats"],
        "pass@1": p1,
        "stderr": se,
        "ci95": list(ci95(p1, se)) if p1 is not None else None,
        "pass@k": {str(k): _mean_over_tasks(pairs, k, pass_at_k) for k in ks},
        "pass^k": {str(k): _mean_over_tasks(pairs, k, pass_hat_k) for k in ks},
        "mean_reward": (sum(o.reward_sum / o.n for o in scored) / len(scored)) if scored else None,
    }
