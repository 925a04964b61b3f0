"""Per-task outcome counts and coverage, straight from SQL over the store."""

from __future__ import annotations

import json

import polars as pl

from gymflow.analysis.frames import frame
from gymflow.analysis.results import Coverage, VersionRead
from gymflow.store.db import StoreError
from gymflow.store.verifier_versions import current_verifier_version


def check_verifier_version(con, version: str | None) -> str:
    """`version` when the store holds it; None: the run's current version
    (`store.verifier_versions`)."""
    if version is None:
        return current_verifier_version(con)
    known = [r[0] for r in con.execute("SELECT verifier_version FROM verifier_versions").fetchall()]
    if version not in known:
        raise StoreError(
            f"no verifier version {version!r} in this store (have: {', '.join(known)})"
        )
    return version


#: how a reverify's version records its origin (`gymflow.reverify.new_version`)
REVERIFY_SOURCE = "reverify from "


def version_read(con, version: str) -> VersionRead:
    """What made `version` (a version the store holds): the run's verdicts, or a reverify."""
    name, params, source = con.execute(
        "SELECT verifier_name, params_json, source FROM verifier_versions "
        "WHERE verifier_version = ?",
        [version],
    ).fetchone()
    judged = con.execute("SELECT verifier_version FROM runs LIMIT 1").fetchone()
    reverified = (source or "").startswith(REVERIFY_SOURCE)
    return VersionRead(
        version=version,
        verifier=name,
        params=json.loads(params or "{}"),
        origin="reverify" if reverified else "run",
        source=source,
        reverified_from=source.removeprefix(REVERIFY_SOURCE) if reverified else None,
        judged_under=judged[0] if judged else None,
    )


def coverage(con, verifier_version: str) -> Coverage:
    expected, stored, scored = con.execute(
        """
        SELECT
          (SELECT count(*) FROM tasks) * (SELECT max(repeats) FROM runs),
          (SELECT count(*) FROM rollouts),
          (SELECT count(*) FROM rollouts r JOIN verifications v USING (rollout_id)
            WHERE r.status = 'completed' AND v.verifier_version = ? AND v.status = 'ok')
        """,
        [verifier_version],
    ).fetchone()
    return Coverage(
        expected=expected, scored=scored, failed=stored - scored, missing=max(0, expected - stored)
    )


SCORED_SQL = "v.status = 'ok' AND r.status = 'completed'"


def scored_filter(failures_as_zero: bool) -> str:
    """SQL predicate over rollouts `r` joined to verifications `v`: which rollouts count.

    With `failures_as_zero`, every stored rollout counts (failed ones as not passed, reward 0)."""
    return "r.rollout_id IS NOT NULL" if failures_as_zero else SCORED_SQL


def task_counts_sql(*, failures_as_zero: bool = False) -> str:
    """SQL (one `?`: the verifier version) yielding one row per task in the store: task_id, tags,
    difficulty, n (scored rollouts), c (passing), reward_sum and reward_sq_sum over scored
    rollouts, stored (rollouts stored) and verified (completed with an ok verification, the
    `scored` of coverage). Tasks with nothing scored have n = 0."""
    scored = scored_filter(failures_as_zero)
    reward = "coalesce(v.reward, 0.0)" if failures_as_zero else "v.reward"
    # Aggregate on task_id alone, then attach tags and difficulty: grouping by a list column
    # (tags) costs more than the whole join at a million rollouts.
    return f"""
        WITH counts AS (
            SELECT r.task_id,
                   count(*) FILTER (WHERE {scored}) AS n,
                   count(*) FILTER (WHERE {scored} AND coalesce(v.passed, FALSE)) AS c,
                   sum({reward}) FILTER (WHERE {scored}) AS reward_sum,
                   sum({reward} * {reward}) FILTER (WHERE {scored}) AS reward_sq_sum,
                   count(*) AS stored,
                   count(*) FILTER (WHERE {SCORED_SQL}) AS verified
            FROM rollouts r
            LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
            GROUP BY r.task_id
        )
        SELECT t.task_id, t.tags, t.difficulty,
               coalesce(k.n, 0) AS n, coalesce(k.c, 0) AS c,
               coalesce(k.reward_sum, 0.0) AS reward_sum,
               coalesce(k.reward_sq_sum, 0.0) AS reward_sq_sum,
               coalesce(k.stored, 0) AS stored, coalesce(k.verified, 0) AS verified
        FROM tasks t LEFT JOIN counts k USING (task_id)
        """


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
