"""Runs of one benchmark made on given days, each passing a given number of tasks: the nights
a regression gate's tests set up under a root."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder, reseal

TASKS, REPEATS = 20, 2


def dated_run(run_dir: Path, name: str, passing: int, day: float) -> Path:
    """A run of the benchmark made on `day`: tasks below `passing` pass every repeat."""
    builder = StoreBuilder(RunMeta(run_id=name, model=name, repeats=REPEATS))
    for i in range(TASKS):
        builder.task(f"t{i:02d}", answer=i)
        builder.fill(f"t{i:02d}", ("1" if i < passing else "0") * REPEATS)
    builder.write(run_dir)
    with connect(run_dir) as con:
        con.execute("UPDATE runs SET created_at = ?", [datetime(2026, 1, 1) + timedelta(day)])
        reseal(con)
    return run_dir
