"""Prefect tasks for the pure stages: the run's analysis, cached on the store file's state and
persisted as JSON (the typed results round-trip: `gymflow.analysis.results`), and the report
rendered from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from gymflow.analysis.results import RunAnalysis
from gymflow.analysis.run import analyse
from gymflow.reports.render import write_report
from gymflow.reports.sections import DEFAULT_LIMITS
from gymflow.store.db import connect, store_path

#: Part of the cache key: a result cached under an older shape of the results is not read back.
RESULTS_VERSION = 2  # 2: Profile.simulated, Factor.key and .group


def _file_state(path: Path) -> str:
    try:
        info = path.stat()
    except FileNotFoundError:
        return "-"
    return f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def _store_key(context, parameters: dict[str, Any]) -> str:
    """The store file and its write-ahead log as they are now (inode, size, modification time
    in ns): any write changes the key, and taking it does not open the store (an open and a
    query, ~0.02 s, before the analysis opens it again)."""
    path = store_path(parameters["run_dir"]).resolve()
    wal = path.with_name(path.name + ".wal")
    return f"{context.task.name}|v{RESULTS_VERSION}|{path}|{_file_state(path)}|{_file_state(wal)}"


@task(name="analyse-run", cache_key_fn=_store_key, result_serializer="json")
def analyse_store(run_dir: str) -> RunAnalysis:
    """Health, profile, diagnosis and decision, with the diagnosis bounded as the report
    shows it (the report renders from this analysis, never recomputes it)."""
    with connect(run_dir, read_only=True) as con:
        return analyse(con, top=DEFAULT_LIMITS.diagnosed_tasks, excerpt=0)


@task(name="render-report", cache_policy=NO_CACHE)
def render_report(run_dir: str, analysis: RunAnalysis) -> str:
    return str(write_report(Path(run_dir), analysis=analysis).path.resolve())
