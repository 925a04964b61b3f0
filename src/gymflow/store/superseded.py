"""Setting attempts aside: a failed rollout that a resume runs again, or an errored verification
that a reverify judges again, moves to its `superseded_*` table (numbered, timestamped) in one
transaction. The live tables then hold only the latest attempt, so health never sees two rows
for one (task_id, repeat_index), and every analysis reads the newest outcome; the rollout id is
unchanged, so resumes, merges and comparisons still join on it."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import cast

from duckdb import DuckDBPyConnection

from gymflow.store.db import transaction
from gymflow.store.seal import claim
from gymflow.store.sealed_rows import SEALED_ROWS, rows_removed
from gymflow.store.unjudged import rejudged_sql


def _set_aside(
    con,
    ids_sql: str,
    params: dict[str, object],
    tables: tuple[str, ...],
    *,
    version: str | None = None,
) -> int:
    """Move the rows of `tables` whose rollout_id `ids_sql` selects (and, with `version`, only
    that verifier version's) into their superseded tables, numbered by the attempts of the
    last table already set aside; returns how many rollout ids moved."""
    now = datetime.now(UTC).replace(tzinfo=None)
    counted = tables[-1]
    only_version = "" if version is None else "AND verifier_version = $version"
    with transaction(con):
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE set_aside AS
            SELECT i.rollout_id, 1 + coalesce(s.n, 0) AS rollout_attempt
            FROM ({ids_sql}) i
            LEFT JOIN (SELECT rollout_id, count(*) AS n FROM superseded_{counted}
                       WHERE TRUE {only_version} GROUP BY rollout_id) s USING (rollout_id)
            """,
            params,
        )
        moved = con.execute("SELECT count(*) FROM set_aside").fetchone()[0]
        store = cast(DuckDBPyConnection, con)
        key = functools.cache(lambda: claim(store, "run store"))
        if moved:
            key()  # what it sets aside leaves an older state: the generation is raised
        for table in tables if moved else ():
            where = f"rollout_id IN (SELECT rollout_id FROM set_aside) {only_version}"
            if (spec := SEALED_ROWS.get(table)) is not None:  # out of its seal as they leave
                rows_removed(
                    store, key, spec, where, None if version is None else {"version": version}
                )
            con.execute(
                f"""
                INSERT INTO superseded_{table} BY NAME
                SELECT t.*, a.rollout_attempt, $now::TIMESTAMP AS superseded_at
                FROM {table} t JOIN set_aside a USING (rollout_id)
                WHERE TRUE {only_version}
                """,
                {"now": now, **({} if version is None else {"version": version})},
            )
            con.execute(
                f"DELETE FROM {table} WHERE {where}",
                {} if version is None else {"version": version},
            )
        con.execute("DROP TABLE set_aside")
    return moved


def supersede_failed(con, run_id: str, kinds: tuple[str, ...]) -> int:
    """Set aside the run's rollouts whose (last) attempt failed with one of `kinds` (the
    caller's: the transient kinds, `rollouts.collect.RESUMABLE_KINDS`), with their
    model calls: they become missing, and the resume runs them again."""
    return _set_aside(
        con,
        "SELECT rollout_id FROM rollouts WHERE run_id = $run_id AND status = 'failed' "
        "AND list_contains($kinds, failure_kind)",
        {"run_id": run_id, "kinds": list(kinds)},
        ("model_calls", "verifications", "rollouts"),
    )


def supersede_verifications(con, verifier_version: str, *, carried: bool = False) -> int:
    """Set aside the verifications of `verifier_version` that errored (a crash, a timeout, a
    judge that failed), and with `carried` those a `--failed-only` reverify copied from its base
    version (`details.carried_from`: verdicts of other parameters, never judged by these): a
    reverify judges those rollouts again under the same version."""
    return _set_aside(
        con,
        "SELECT rollout_id FROM verifications WHERE verifier_version = $version "
        f"AND {rejudged_sql(carried=carried)}",
        {"version": verifier_version},
        ("verifications",),
        version=verifier_version,
    )
