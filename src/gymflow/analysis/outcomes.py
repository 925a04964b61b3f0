"""Per-task outcome counts and coverage, straight from SQL over the store."""

from __future__ import annotations

import json

import polars as pl

from gymflow.analysis.frames import frame
from gymflow.analysis.results import Coverage, VersionRead
from gymflow.store.db import StoreError
from gymflow.store.queries.scores import coverage_counts, task_counts_sql
from gymflow.store.runs import judged_version
from gymflow.store.verifier_versions import (
    current_verifier_version,
    stored_versions,
    version_record,
)


def check_verifier_version(con, version: str | None) -> str:
    """`version` when the store holds it; None: the run's current version
    (`store.verifier_versions`)."""
    if version is None:
        return current_verifier_version(con)
    known = stored_versions(con)
    if version not in known:
        raise StoreError(
            f"no verifier version {version!r} in this store (have: {', '.join(known)})"
        )
    return version


#: how a reverify's version records its origin (`gymflow.reverify.new_version`)
REVERIFY_SOURCE = "reverify from "


def version_read(con, version: str) -> VersionRead:
    """What made `version` (a version the store holds): the run's verdicts, or a reverify."""
    name, params, source = version_record(con, version)
    judged = judged_version(con)
    reverified = (source or "").startswith(REVERIFY_SOURCE)
    return VersionRead(
        version=version,
        verifier=name,
        params=json.loads(params or "{}"),
        origin="reverify" if reverified else "run",
        source=source,
        reverified_from=(source or "").removeprefix(REVERIFY_SOURCE) if reverified else None,
        judged_under=judged,
    )


def coverage(con, verifier_version: str) -> Coverage:
    expected, stored, scored = coverage_counts(con, verifier_version)
    return Coverage(
        expected=expected, scored=scored, failed=stored - scored, missing=max(0, expected - stored)
    )


def task_table(con, verifier_version: str, *, failures_as_zero: bool = False) -> pl.DataFrame:
    """`task_counts_sql` as a Polars frame, ordered by task_id."""
    sql = task_counts_sql(failures_as_zero=failures_as_zero)
    return frame(con, f"{sql} ORDER BY t.task_id", [verifier_version])


def coverage_of(tasks: pl.DataFrame, repeats: int) -> Coverage:
    """Coverage from a `task_table` frame (one pass over the store instead of two)."""
    expected = tasks.height * repeats
    stored = int(tasks["stored"].sum()) if tasks.height else 0
    scored = int(tasks["verified"].sum()) if tasks.height else 0
    return Coverage(
        expected=expected, scored=scored, failed=stored - scored, missing=max(0, expected - stored)
    )
