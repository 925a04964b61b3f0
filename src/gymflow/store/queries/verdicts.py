"""The SQL of reverify: which rollouts a new version judges and which verdicts it carries over
from its base, which a stored version judges again, what `reverify --check` recomputes, and
which rollouts and tasks flipped between two versions. The rollouts to judge stream in batches
(`fetchmany`); the flips are counted and listed in DuckDB."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gymflow.store.db import first_sql
from gymflow.store.handle import Connection, one_row


def versions_newest_first(con: Connection) -> list[tuple[str, str, str | None]]:
    """Every stored version as (verifier_version, verifier_name, params_json), newest first."""
    return con.execute(
        "SELECT verifier_version, verifier_name, params_json FROM verifier_versions "
        "ORDER BY created_at DESC, verifier_version"
    ).fetchall()


def _selection(failed_only: bool) -> str:
    """Rollouts `r` to judge again, given the base version's verdict `b`."""
    judged_again = "r.status = 'completed'"
    if failed_only:
        judged_again += " AND NOT coalesce(b.status = 'ok' AND b.passed, FALSE)"
    return judged_again


def new_version_source(failed_only: bool) -> str:
    """The rollouts `r` a new version judges (FROM ... WHERE; one `?`: the base version): the
    completed ones, or with `failed_only` those the base version did not pass."""
    return (
        "FROM rollouts r LEFT JOIN verifications b ON b.rollout_id = r.rollout_id "
        f"AND b.verifier_version = ? WHERE {_selection(failed_only)}"
    )


#: The rollouts `r` a stored version judges again (one `?`: the version): the completed ones
#: it holds no verdict of.
REJUDGE_SOURCE = (
    "FROM rollouts r ANTI JOIN (SELECT rollout_id FROM verifications "
    "WHERE verifier_version = ?) v USING (rollout_id) WHERE r.status = 'completed'"
)


def carry_passing(
    con: Connection, staged: str, version: str, base: str, now: datetime, *, failed_only: bool
) -> None:
    """Stage in `staged` the base version's passing verdicts, copied row for row into
    `version` (marked `carried_from`), for the rollouts `new_version_source` does not judge."""
    con.execute(
        f"""
        INSERT INTO {staged} BY NAME
        SELECT b.rollout_id, ? AS verifier_version, b.status, b.reward, b.passed,
               b.failure_kind,
               json_merge_patch(coalesce(b.details_json, '{{}}'),
                                json_object('carried_from', ?)) AS details_json,
               ? AS created_at
        FROM rollouts r
        JOIN verifications b ON b.rollout_id = r.rollout_id AND b.verifier_version = ?
        WHERE NOT ({_selection(failed_only)})
        """,
        [version, base, now, base],
    )


def recheck_rows(con: Connection, version: str) -> Connection:
    """A cursor over every completed rollout, with or without a verdict under `version`, and
    every rollout with one, by task, repeat and id: rollout_id, task_id, output_text,
    trajectory_json, repeat_index, status, then the verdict's status, reward, passed and
    failure kind."""
    return con.execute(
        """
        SELECT r.rollout_id, r.task_id, r.output_text, r.trajectory_json, r.repeat_index,
               r.status, v.status, v.reward, v.passed, v.failure_kind
        FROM rollouts r
        LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE v.rollout_id IS NOT NULL OR r.status = 'completed'
        ORDER BY r.task_id, r.repeat_index, r.rollout_id
        """,
        [version],
    )


def flipped_rollouts(
    con: Connection, old: str, new: str, *, limit: int | None
) -> tuple[list[str], list[str], int]:
    """(rollouts passing under `new` only, under `old` only, each at most `limit`, by task and
    repeat; how many flipped). Passing: an ok verdict that passed."""
    cap = f"[1:{int(limit)}]" if limit is not None else ""
    to_pass, to_fail, count = one_row(
        con,
        f"""
        WITH outcome AS (
            SELECT r.rollout_id, r.task_id, r.repeat_index,
                   coalesce(a.status = 'ok' AND a.passed, FALSE) AS before,
                   coalesce(b.status = 'ok' AND b.passed, FALSE) AS after
            FROM rollouts r
            LEFT JOIN verifications a ON a.rollout_id = r.rollout_id AND a.verifier_version = ?
            LEFT JOIN verifications b ON b.rollout_id = r.rollout_id AND b.verifier_version = ?
        )
        SELECT coalesce(list(rollout_id ORDER BY task_id, repeat_index)
                        FILTER (WHERE after AND NOT before), []){cap},
               coalesce(list(rollout_id ORDER BY task_id, repeat_index)
                        FILTER (WHERE before AND NOT after), []){cap},
               count(*) FILTER (WHERE before <> after)
        FROM outcome
        """,
        [old, new],
    )
    return to_pass, to_fail, count


def flipped_tasks(con: Connection, old: str, new: str) -> list[tuple[Any, ...]]:
    """(task_id, passing rollouts under `old`, under `new`) for each task where they differ."""
    return con.execute(
        """
        SELECT r.task_id,
               count(*) FILTER (WHERE a.status = 'ok' AND a.passed) AS passed_before,
               count(*) FILTER (WHERE b.status = 'ok' AND b.passed) AS passed_after
        FROM rollouts r
        LEFT JOIN verifications a ON a.rollout_id = r.rollout_id AND a.verifier_version = ?
        LEFT JOIN verifications b ON b.rollout_id = r.rollout_id AND b.verifier_version = ?
        GROUP BY r.task_id HAVING passed_before <> passed_after
        ORDER BY r.task_id
        """,
        [old, new],
    ).fetchall()


def disagreements(con: Connection, version: str, examples: int) -> list[tuple[Any, ...]]:
    """For each other stored version that judges some rollout differently from `version` (both
    verdicts `ok`): (version, the other version, how many rollouts, the first `examples` ids)."""
    return con.execute(
        f"""
        SELECT a.verifier_version, b.verifier_version, count(*),
               {first_sql("a.rollout_id", "a.rollout_id", examples)}
        FROM (SELECT * FROM verifications WHERE verifier_version = ? AND status = 'ok') a
        JOIN (SELECT * FROM verifications WHERE verifier_version <> ? AND status = 'ok') b
          ON a.rollout_id = b.rollout_id
        WHERE a.passed <> b.passed
        GROUP BY ALL ORDER BY 1, 2
        """,
        [version, version],
    ).fetchall()
