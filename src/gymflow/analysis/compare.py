"""Paired comparison of two runs of one benchmark version, task by task.

Pairing is on `task_id`, the unit both runs sampled. Repeats are not paired: repeat 0 of run A
has nothing in common with repeat 0 of run B, so McNemar's test uses one binary outcome per task,
its majority verdict (solved when more than half of its scored rollouts pass; a tie is not a
majority). With one repeat per task this is the usual per-sample McNemar test.

Two runs of one benchmark version need not hold the same tasks (a shard missing, an imported
file with a subset of the rows): the comparison pairs the tasks both scored and lists the rest."""

from __future__ import annotations

import numpy as np
import polars as pl

from gymflow.analysis.factors import attribution, differing_factors
from gymflow.analysis.outcomes import check_verifier_version, task_table
from gymflow.analysis.paired import (
    PAIRED_TEST,
    mcnemar,
    mcnemar_power_summary,
    paired_t,
    paired_t_power_summary,
)
from gymflow.analysis.results import Comparison, McNemar, Paired, TaskIds
from gymflow.core.errors import UserError
from gymflow.store.runs import run_info


class CompareError(UserError):
    """Two runs that cannot be compared (different benchmark versions, no common tasks)."""


#: the difference (in pass rate, and in share solved by majority) the tasks-needed figures are for
POWER_DIFFERENCE = 0.05


def protocol_version(benchmark_version: str | None) -> str:
    """A dataset benchmark's version is `protocol.rows`: two runs whose rows alone differ are
    compared (on the task ids they share), with "dataset version" among the differing factors."""
    return (benchmark_version or "").partition(".")[0]


def _correlation(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def paired(per_task: pl.DataFrame, *, power_difference: float = POWER_DIFFERENCE) -> Paired:
    """Paired statistics from a frame with task_id, p_a, p_b (per-task pass rates). The verdict
    is the paired t on pass-rate differences (`paired.paired_t`): its difference, CI, p-value and
    power (at `power_difference` in pass rate). The share solved by majority verdict is reported
    beside it with its own test, McNemar's, and its own power (at `power_difference` in share
    solved)."""
    a = per_task["p_a"].to_numpy()
    b = per_task["p_b"].to_numpy()
    test = paired_t(a - b)
    tasks = test.tasks
    solved = per_task.with_columns(solved_a=pl.col("p_a") > 0.5, solved_b=pl.col("p_b") > 0.5)
    a_only = solved.filter(pl.col("solved_a") & ~pl.col("solved_b"))
    b_only = solved.filter(~pl.col("solved_a") & pl.col("solved_b"))
    solved_a = float(solved["solved_a"].mean()) if tasks else None
    solved_b = float(solved["solved_b"].mean()) if tasks else None
    return Paired(
        tasks=tasks,
        mean_a=float(a.mean()) if tasks else None,
        mean_b=float(b.mean()) if tasks else None,
        test=PAIRED_TEST,
        difference=test.difference,
        stderr=test.stderr,
        ci95=test.interval.as_list(),
        ci95_reason=test.interval.reason,
        p_value=test.p_value,
        correlation=_correlation(a, b),
        power=paired_t_power_summary(test, power_difference),
        solved_a=solved_a,
        solved_b=solved_b,
        solved_difference=None if solved_a is None else solved_a - solved_b,
        mcnemar=McNemar.model_validate(mcnemar(a_only.height, b_only.height)),
        flipped=TaskIds(
            a_only=sorted(a_only["task_id"].to_list()),
            b_only=sorted(b_only["task_id"].to_list()),
        ),
        majority_power=mcnemar_power_summary(
            tasks, a_only.height + b_only.height, power_difference
        ),
    )


def compare(
    con_a,
    con_b,
    *,
    verifier_version_a: str | None = None,
    verifier_version_b: str | None = None,
    failures_as_zero: bool = False,
    power_difference: float = POWER_DIFFERENCE,
) -> Comparison:
    """Compare run A with run B (difference = A - B), paired on the task_ids both scored.

    Raises CompareError for different benchmark versions
    (another protocol) or no common scored task; tasks held by one run only do not refuse it."""
    run_a, run_b = run_info(con_a), run_info(con_b)
    if protocol_version(run_a.benchmark_version) != protocol_version(run_b.benchmark_version):
        raise CompareError(
            f"runs {run_a.run_id} and {run_b.run_id} are on different benchmark versions "
            f"({run_a.benchmark or run_a.environment} {run_a.benchmark_version} vs "
            f"{run_b.benchmark or run_b.environment} {run_b.benchmark_version}): their "
            "protocol (dataset, prompt template, repeats or sampling) differs, so a paired "
            "comparison would mislead; rerun both on one benchmark version"
        )
    version_a = check_verifier_version(con_a, verifier_version_a)
    version_b = check_verifier_version(con_b, verifier_version_b)
    rates = []
    for con, version, suffix in ((con_a, version_a, "a"), (con_b, version_b, "b")):
        table = task_table(con, version, failures_as_zero=failures_as_zero)
        rates.append(
            table.filter(pl.col("n") > 0).select(
                "task_id", (pl.col("c") / pl.col("n")).alias(f"p_{suffix}")
            )
        )
    per_task = rates[0].join(rates[1], on="task_id", how="inner").sort("task_id")
    if per_task.is_empty():
        raise CompareError(f"runs {run_a.run_id} and {run_b.run_id} have no scored task in common")
    factors = differing_factors(run_a, run_b, version_a, version_b)
    paired_ids = set(per_task["task_id"])
    unpaired = {
        side: sorted(set(rate["task_id"]) - paired_ids)
        for side, rate in zip(("a_only", "b_only"), rates, strict=True)
    }
    return Comparison.model_validate(
        {
            "a": {
                "run_id": run_a.run_id,
                "model": run_a.model,
                "verifier_version": version_a,
            },
            "b": {
                "run_id": run_b.run_id,
                "model": run_b.model,
                "verifier_version": version_b,
            },
            "benchmark": run_a.benchmark or run_a.environment,
            "benchmark_version": run_a.benchmark_version,
            "factors": factors,
            "attribution": attribution(factors),
            "unpaired_tasks": {side: len(ids) for side, ids in unpaired.items()},
            "unpaired_task_ids": unpaired,
            "outcome": "per-task pass rate, failures "
            + ("counted as 0" if failures_as_zero else "excluded"),
            "binary_outcome": "task solved when more than half of its scored rollouts pass",
            **dict(paired(per_task, power_difference=power_difference)),
        }
    )
