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


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix[:-1]: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def _effective(run_config: dict[str, Any]) -> dict[str, Any]:
    """The config with the sampling the run used: a config without `sampling` took the
    benchmark's (0.7 read as `null` beside a config that wrote 0.7)."""
    return {**run_config["config"], "sampling": run_config["sampling"]}


def config_changes(
    config_a: dict[str, Any], config_b: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
    """(dotted key, A, B) for every config value that differs, except where the run was written
    and how fast: a reader sees, e.g., a changed skill seed or fault rate that no factor names."""
    fa, fb = _flat(config_a), _flat(config_b)
    return [
        (key, fa.get(key), fb.get(key))
        for key in sorted(fa.keys() | fb.keys())
        if key.split(".")[0] not in ("out", "concurrency", "batch_size")
        and fa.get(key) != fb.get(key)
    ]


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
        "config_changes": config_changes(_effective(a["run"]), _effective(b["run"])),
    }
