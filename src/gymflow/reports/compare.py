"""Assembling a comparison report: run A (the run reported on) against run B, paired on task_id.

The statistics are `gymflow.analysis.compare`'s (difference = A - B); this module adds what the
page draws: both runs' headlines and health, and the per-task pass rates for the scatter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from gymflow.analysis.compare import compare
from gymflow.analysis.health import health
from gymflow.analysis.outcomes import check_verifier_version, task_table
from gymflow.analysis.profile import profile
from gymflow.reports.sections import DEFAULT_LIMITS, Limits, run_config
from gymflow.store.db import connect
from gymflow.store.runs import run_info


def _side(con, run_dir: Path) -> dict[str, Any]:
    version = check_verifier_version(con, None)
    rates = task_table(con, version).filter(pl.col("n") > 0)
    return {
        "dir": str(run_dir),
        "run": run_config(run_info(con)),
        "profile": profile(con, verifier_version=version),
        "health": health(con),
        "rates": dict(zip(rates["task_id"], (rates["c"] / rates["n"]).to_list(), strict=True)),
    }


def compare_sections(
    dir_a: Path, dir_b: Path, *, limits: Limits = DEFAULT_LIMITS
) -> dict[str, Any]:
    con_a = connect(dir_a, read_only=True)
    try:
        con_b = connect(dir_b, read_only=True)
        try:
            result = compare(con_a, con_b)
            a, b = _side(con_a, dir_a), _side(con_b, dir_b)
        finally:
            con_b.close()
    finally:
        con_a.close()
    rates_a, rates_b = a.pop("rates"), b.pop("rates")
    common = sorted(rates_a.keys() & rates_b.keys())
    flipped = {
        side: [(t, rates_a[t], rates_b[t]) for t in ids]
        for side, ids in (("a_only", result.flipped.a_only), ("b_only", result.flipped.b_only))
    }
    return {
        "a": a,
        "b": b,
        "compare": result,
        # x: B, y: A, so a dot above the diagonal is a task on which A did better.
        "points": [(rates_b[t], rates_a[t], t) for t in common],
        "flipped": {side: rows[: limits.changed_tasks] for side, rows in flipped.items()},
        "flipped_counts": {side: len(rows) for side, rows in flipped.items()},
    }
