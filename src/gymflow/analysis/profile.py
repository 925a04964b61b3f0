"""The profile of a run: pass@1 with its task-clustered CI, pass@k and pass^k with bootstrap CIs and
the tasks each rests on, majority@k, mean reward, variance components, breakdowns by tag and
difficulty, usage percentiles, and coverage heading it all."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from gymflow.analysis.frames import frame
from gymflow.analysis.outcomes import (
    check_verifier_version,
    coverage_of,
    task_table,
    version_read,
)
from gymflow.analysis.passk import pair_curves, per_task_curves
from gymflow.analysis.results import Estimate, Headline, Profile, Usage
from gymflow.analysis.seals import seal_check, store_seals
from gymflow.analysis.simulated import simulated
from gymflow.analysis.stats import (
    BAND_METHOD,
    CI_METHOD,
    bootstrap_ci95,
    bounded_mean_ci95,
    clustered_stderr,
    design_effect,
    variance_components,
    widened_band,
)
from gymflow.environments.registry import RegistryError, environment_sources
from gymflow.store.db import memory_capped_call
from gymflow.store.queries.rollouts import usage_summary
from gymflow.store.queries.scores import majority_votes, score_groups_sql, task_counts_sql
from gymflow.store.runs import run_info
from gymflow.store.seal import SealCheck

#: rollout columns summarised by percentile
USAGE_COLUMNS = ("input_tokens", "output_tokens", "num_turns", "num_model_calls", "latency_s")


def _number(value: float | None) -> float | None:
    """JSON-safe float: NaN (undefined, e.g. a stderr over one task) becomes None."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _estimate(
    values: list[float], *, rollouts: int, bounds: tuple[float, float] = (0.0, 1.0)
) -> dict[str, Any]:
    """Mean over tasks with its task-clustered standard error and 95% CI (`bounded_mean_ci95`:
    inside `bounds`, None with `ci95_reason` below two tasks)."""
    if not values:
        return {"mean": None, "stderr": None, "ci95": None, "ci95_reason": "no scored task"}
    mean = sum(values) / len(values)
    se = clustered_stderr(values)
    interval = bounded_mean_ci95(
        mean, se, tasks=len(values), rollouts=rollouts, low=bounds[0], high=bounds[1]
    )
    return {
        "mean": mean,
        "stderr": _number(se),
        "ci95": interval.as_list(),
        "ci95_reason": interval.reason,
    }


def reward_range(environment: str | None, task_means: np.ndarray) -> tuple[float, float]:
    """The environment's declared reward range; for a run of an environment this installation
    does not know (an imported one), the unit range widened to the task means observed."""
    try:
        source = environment_sources().get(environment) if environment else None
    except RegistryError:  # a broken manifest elsewhere on the path: this run still profiles
        source = None
    if source is not None:
        low, high = source.manifest.reward_range
        return float(low), float(high)
    low = min(0.0, float(task_means.min())) if len(task_means) else 0.0
    high = max(1.0, float(task_means.max())) if len(task_means) else 1.0
    return low, high


def _breakdown(scored: pl.DataFrame, column: str) -> dict[str, Estimate]:
    """pass@1 with clustered SE and CI per value of `column` (tags are exploded: a task with two
    tags counts in both groups)."""
    if scored.is_empty():
        return {}
    table = scored.select(column, "p", "n")
    if column == "tags":
        table = table.explode("tags")
    table = table.with_columns(pl.col(column).cast(pl.Utf8).fill_null("(none)"))
    groups: dict[str, Estimate] = {}
    for key, group in table.group_by(column, maintain_order=True):
        estimate = _estimate(group["p"].to_list(), rollouts=int(group["n"].sum()))
        groups[key[0]] = Estimate(
            tasks=group.height,
            pass_at_1=estimate["mean"],
            stderr=estimate["stderr"],
            ci95=estimate["ci95"],
            ci95_reason=estimate["ci95_reason"],
        )
    return dict(sorted(groups.items()))


def weighting_note(pass1: float | None, pooled: float | None, tasks: int, rollouts: int) -> str:
    """The sentence a reader needs when tasks have different numbers of scored rollouts."""
    if pass1 is None or pooled is None:
        return "pass@1 weights every task equally; no rollout is scored"
    return (
        f"pass@1 ({pass1:.1%}) weights every task equally: it is the mean of {tasks} per-task "
        f"pass rates. Pooling all {rollouts} scored rollouts instead, so that a task weighs by "
        f"its scored repeats, gives {pooled:.1%}."
    )


def majority_at_k(con, groups: str) -> float | None:
    """Mean over tasks of majority-vote correctness over all of a task's scored rollouts, from
    the table `groups` (`score_groups_sql(answers=True)`).

    Votes are the verifier's extracted answers after normalisation; the task counts as solved
    when the most common answer is a correct one, with ties split evenly (the expected score of
    a random tie-break). A task whose rollouts extracted nothing scores 0. None when the verifier
    reports no extracted answers at all."""
    voted, score = majority_votes(con, groups)
    return score if voted else None


#: The temporary table of a profile's score groups: per task and extracted answer.
_GROUPS = "profile_score_groups"


def _tasks_and_majority(
    con, version: str, *, failures_as_zero: bool
) -> tuple[pl.DataFrame, float | None]:
    """The per-task counts (`outcomes.task_table`) and majority@k, from one join of the
    rollouts with their verdicts."""
    groups = score_groups_sql(failures_as_zero=failures_as_zero, answers=True)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_GROUPS} AS {groups}", [version])
    try:
        tasks = frame(con, f"{task_counts_sql(groups=_GROUPS)} ORDER BY t.task_id")
        return tasks, majority_at_k(con, _GROUPS)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_GROUPS}")


def usage_percentiles(con) -> dict[str, Usage]:
    """mean, p50, p90, p99 and max of tokens, turns, model calls and latency per rollout."""
    row = usage_summary(con, USAGE_COLUMNS)
    usage: dict[str, Usage] = {}
    for i, column in enumerate(USAGE_COLUMNS):
        mean, quantiles, maximum = row[3 * i : 3 * i + 3]
        p50, p90, p99 = quantiles or (None, None, None)
        usage[column] = Usage(
            mean=_number(mean),
            p50=_number(p50),
            p90=_number(p90),
            p99=_number(p99),
            max=_number(maximum),
        )
    return usage


@memory_capped_call
def profile(
    con,
    *,
    verifier_version: str | None = None,
    failures_as_zero: bool = False,
    bootstrap_samples: int = 1000,
    seed: int = 0,
    seals: SealCheck | None = None,
) -> Profile:
    """Profile the run in `con` under one verifier version (the newest unless given); `seals`:
    the seal check of `con` the caller made for this analysis, in place of checking here.

    Returns the Profile: run_id, benchmark, environment, model, verifier_version, coverage
    {expected, scored, failed, missing}, failures (how failures were treated), tasks,
    tasks_scored, repeats, "pass@1", stderr, ci95 [low, high] | None, ci95_reason (why None),
    ci95_method, "pass@1_rollout_weighted" (all scored rollouts pooled), weighting (a sentence
    saying which is which), "pass@k" {k: value}, "pass^k" {k: value}, "tasks_at_k" {k: tasks
    with at least k scored rollouts, the tasks pass@k and pass^k average over}, "retry_value"
    {k: pass@k - pass@1, both over the tasks_at_k tasks}, "pass@k_bootstrap_ci95" {k: [low,
    high] | None}, "pass@k_bootstrap_ci95_reason" {k: why None | None}, bootstrap {samples,
    seed, unit}, "majority@k" {k: value} | None (k = repeats), mean_reward, mean_reward_stderr,
    mean_reward_ci95, mean_reward_ci95_reason, reward_range [low, high], variance {pass:
    {between, within, total, icc, repeats_per_task, reason}, reward: {...}} (one-way ANOVA,
    `variance_components`), design_effect (from the pass ICC), by_tag {tag: {tasks, pass@1,
    stderr, ci95, ci95_reason}}, by_difficulty {...}, usage {column: {mean, p50, p90, p99,
    max}}, seals (what the store's seals say: `analysis.seals`). All values are floats or None
    (None where undefined)."""
    # the seals (and the column statistics every query answers from) before any lookup: a
    # forged store is refused as what it is, not as a version it seems not to hold
    seals = seals if seals is not None else seal_check(con)
    version = check_verifier_version(con, verifier_version)
    run = run_info(con)
    tasks, majority = _tasks_and_majority(con, version, failures_as_zero=failures_as_zero)
    scored = tasks.filter(pl.col("n") > 0).with_columns(
        p=pl.col("c") / pl.col("n"), reward_mean=pl.col("reward_sum") / pl.col("n")
    )
    repeats = int(run.repeats or 0)
    ks = np.arange(1, max(repeats, 1) + 1)
    n = scored["n"].to_numpy()
    c = scored["c"].to_numpy()
    at_table, hat_table, group = pair_curves(n, c, ks)
    at_tasks, hat_tasks = at_table[group], hat_table[group]
    at_mean = [_number(v) for v in _nanmean(at_tasks)]
    hat_mean = [_number(v) for v in _nanmean(hat_tasks)]
    tasks_at_k = [int(v) for v in (~np.isnan(at_tasks)).sum(axis=0)]
    low, high = bootstrap_ci95(at_table, groups=group, samples=bootstrap_samples, seed=seed)
    bands = [
        widened_band(lo, hi, at_tasks[:, j], independent=int((n // k).sum()))
        for j, (k, lo, hi) in enumerate(zip(ks.tolist(), low, high, strict=True))
    ]
    rollouts_scored = int(n.sum())
    p = scored["p"].to_numpy()
    pass1 = _estimate(p.tolist(), rollouts=rollouts_scored)
    pooled = float(c.sum()) / rollouts_scored if rollouts_scored else None
    reward_means = scored["reward_mean"].to_numpy()
    bounds = reward_range(run.environment, reward_means)
    reward = _estimate(reward_means.tolist(), rollouts=rollouts_scored, bounds=bounds)
    pass_variance = variance_components(n, c, c)  # a pass is 0 or 1: its square is itself
    reward_variance = variance_components(
        n, scored["reward_sum"].to_numpy(), scored["reward_sq_sum"].to_numpy()
    )
    key = [str(k) for k in ks]
    return Profile.model_validate(
        {
            "run_id": run.run_id,
            "benchmark": run.benchmark,
            "environment": run.environment,
            "model": run.model,
            "simulated": simulated(con),
            "verifier_version": version,
            "version_read": version_read(con, version),
            "coverage": coverage_of(tasks, repeats).as_dict(),
            "failures": "counted as failures (reward 0)"
            if failures_as_zero
            else "excluded from scores",
            "tasks": tasks.height,
            "tasks_scored": scored.height,
            "repeats": repeats,
            "pass@1": pass1["mean"],
            "stderr": pass1["stderr"],
            "ci95": pass1["ci95"],
            "ci95_reason": pass1["ci95_reason"],
            "ci95_method": CI_METHOD,
            "pass@1_rollout_weighted": pooled,
            "weighting": weighting_note(pass1["mean"], pooled, scored.height, rollouts_scored),
            "pass@k": dict(zip(key, at_mean, strict=True)),
            "pass^k": dict(zip(key, hat_mean, strict=True)),
            "tasks_at_k": dict(zip(key, tasks_at_k, strict=True)),
            "retry_value": dict(zip(key, _retry_values(at_tasks), strict=True)),
            "pass@k_bootstrap_ci95": {
                k: None if band is None else [float(band[0]), float(band[1])]
                for k, band in zip(key, bands, strict=True)
            },
            "pass@k_bootstrap_ci95_reason": {
                k: None
                if band is not None
                else f"{count} task{'s' if count != 1 else ''} with at least {k} scored rollouts: "
                "a bootstrap over tasks needs two"
                for k, band, count in zip(key, bands, tasks_at_k, strict=True)
            },
            "bootstrap": {
                "samples": bootstrap_samples,
                "seed": seed,
                "unit": "task",
                "method": BAND_METHOD,
            },
            "majority@k": None if majority is None else {str(repeats): majority},
            "mean_reward": reward["mean"],
            "mean_reward_stderr": reward["stderr"],
            "mean_reward_ci95": reward["ci95"],
            "mean_reward_ci95_reason": reward["ci95_reason"],
            "reward_range": list(bounds),
            "variance": {"pass": pass_variance, "reward": reward_variance},
            "design_effect": design_effect(pass_variance["icc"], n),
            "by_tag": _breakdown(scored, "tags"),
            "by_difficulty": _breakdown(scored, "difficulty"),
            "usage": usage_percentiles(con),
            "seals": store_seals(con, seals),
        }
    )


def _retry_values(at_tasks: np.ndarray) -> list[float | None]:
    """pass@k - pass@1 per k, both averaged over the tasks with at least k scored rollouts: over
    all tasks, pass@1 would also count tasks pass@k leaves out, and a task with one passing
    rollout beside one with two failing would show a retry value of -50%."""
    values: list[float | None] = []
    for j in range(at_tasks.shape[1]):
        counted = ~np.isnan(at_tasks[:, j])
        if not counted.any():
            values.append(None)
            continue
        values.append(float(at_tasks[counted, j].mean() - at_tasks[counted, 0].mean()))
    return values


def _nanmean(matrix: np.ndarray) -> np.ndarray:
    """Column means over the tasks that count (non-NaN); NaN for a column no task fills."""
    counts = (~np.isnan(matrix)).sum(axis=0)
    sums = np.nansum(matrix, axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def headline(con, verifier_version: str, *, failures_as_zero: bool = False) -> Headline:
    """The few numbers a summary line needs, without bootstrap or breakdowns (`Headline`)."""
    tasks = task_table(con, verifier_version, failures_as_zero=failures_as_zero)
    scored = tasks.filter(pl.col("n") > 0)
    repeats = max(int(run_info(con).repeats or 1), 1)
    at_k, _ = per_task_curves(scored["n"].to_numpy(), scored["c"].to_numpy(), np.array([repeats]))
    pass1 = _estimate((scored["c"] / scored["n"]).to_list(), rollouts=int(scored["n"].sum()))
    return Headline.model_validate(
        {
            "verifier_version": verifier_version,
            "coverage": coverage_of(tasks, repeats),
            "pass@1": pass1["mean"],
            "stderr": pass1["stderr"],
            "ci95": pass1["ci95"],
            "pass@k": {str(repeats): _number(_nanmean(at_k)[0]) if len(at_k) else None},
            "tasks_at_k": {str(repeats): int((~np.isnan(at_k)).sum())},
            "mean_reward": _number((scored["reward_sum"] / scored["n"]).mean()),
        }
    )
