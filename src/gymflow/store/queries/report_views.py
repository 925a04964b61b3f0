"""The report's own views of a run store: each one SQL query, each a table or chart's rows,
laid out by `gymflow.reports.sections`.

These are layouts of stored rows (the outcome grid, distributions, example rollouts, reward
changes between verifier versions), not statistics: the numbers come from gymflow.analysis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gymflow.store.handle import Connection, one_row


@dataclass(frozen=True, slots=True)
class TaskRow:
    task_id: str
    tags: list[str]
    difficulty: str | None
    codes: str  # one outcome code per repeat (see svg.OUTCOMES)

    @property
    def scored(self) -> int:
        return self.codes.count("P") + self.codes.count("W")

    @property
    def passed(self) -> int:
        return self.codes.count("P")

    @property
    def rate(self) -> float | None:
        return self.passed / self.scored if self.scored else None


def outcome_rows(con: Connection, verifier_version: str) -> list[TaskRow]:
    """Every task with one outcome code per expected repeat, in task order."""
    rows = con.execute(
        """
        WITH cells AS (
          SELECT t.task_id, t.task_index, t.tags, t.difficulty, gs.r,
                 CASE WHEN ro.rollout_id IS NULL THEN 'M'
                      WHEN ro.status <> 'completed' THEN 'F'
                      WHEN v.status IS DISTINCT FROM 'ok' THEN 'E'
                      WHEN v.passed THEN 'P' ELSE 'W' END AS code
          FROM tasks t
          CROSS JOIN (SELECT range AS r FROM range((SELECT max(repeats) FROM runs))) gs
          LEFT JOIN rollouts ro ON ro.task_id = t.task_id AND ro.repeat_index = gs.r
          LEFT JOIN verifications v
            ON v.rollout_id = ro.rollout_id AND v.verifier_version = ?
        )
        SELECT task_id, any_value(tags), any_value(difficulty), string_agg(code, '' ORDER BY r)
        FROM cells GROUP BY task_id, task_index ORDER BY task_index, task_id
        """,
        [verifier_version],
    ).fetchall()
    return [TaskRow(task_id, list(tags or []), diff, codes) for task_id, tags, diff, codes in rows]


def rollouts_by_id(
    con: Connection, ids: list[str], verifier_version: str
) -> dict[str, dict[str, Any]]:
    """Stored rollouts with their verification under `verifier_version`."""
    if not ids:
        return {}
    cursor = con.execute(
        """
        SELECT r.rollout_id, r.task_id, r.repeat_index, r.status, r.failure_kind, r.error,
               r.output_text, r.trajectory_json, r.num_turns, r.input_tokens, r.output_tokens,
               r.latency_s, v.status AS verify_status, v.reward, v.passed,
               v.failure_kind AS verify_failure_kind, v.details_json
        FROM rollouts r
        LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.rollout_id IN (SELECT unnest(?::VARCHAR[]))
        """,
        [verifier_version, ids],
    )
    names = [d[0] for d in cursor.description]
    return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


#: rollout column -> (label, unit); the columns whose percentiles the profile reports
DISTRIBUTIONS: dict[str, tuple[str, str]] = {
    "output_tokens": ("output tokens", ""),
    "input_tokens": ("input tokens", ""),
    "num_turns": ("turns", ""),
    "num_model_calls": ("model calls", ""),
    "latency_s": ("latency", " s"),
}


def histogram(con: Connection, column: str, *, bins: int = 20) -> list[tuple[float, float, int]]:
    """Equal-width bins (low, high, count) of one rollout column over every stored rollout;
    integer columns get integer-width bins."""
    lo, hi = one_row(con, f"SELECT min({column}), max({column}) FROM rollouts")
    if lo is None:
        return []
    if column == "latency_s":
        width = (hi - lo) / bins if hi > lo else 1.0
    else:
        width = float(max(1, -(-(hi - lo + 1) // bins)))
    counts = dict(
        con.execute(
            f"""
            SELECT least(floor(({column} - ?) / ?)::INTEGER, ?), count(*)
            FROM rollouts WHERE {column} IS NOT NULL GROUP BY 1
            """,
            [lo, width, bins - 1],
        ).fetchall()
    )
    return [
        (lo + i * width, lo + (i + 1) * width, counts.get(i, 0)) for i in range(max(counts) + 1)
    ]


def verifier_versions(con: Connection) -> list[dict[str, Any]]:
    cursor = con.execute(
        "SELECT verifier_version, verifier_name, params_json, source, created_at "
        "FROM verifier_versions ORDER BY created_at, verifier_version"
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def reward_changes(con: Connection, old: str, new: str) -> list[dict[str, Any]]:
    """Task by task, the passing rollouts and mean reward under two verifier versions of the
    same rollouts, for the tasks where either moved. (Which rollouts flipped is
    `gymflow.reverify.flips`.)"""
    cursor = con.execute(
        """
        SELECT r.task_id,
               count(*) FILTER (WHERE a.status = 'ok') AS n_old,
               count(*) FILTER (WHERE a.status = 'ok' AND a.passed) AS c_old,
               count(*) FILTER (WHERE b.status = 'ok') AS n_new,
               count(*) FILTER (WHERE b.status = 'ok' AND b.passed) AS c_new,
               avg(a.reward) AS reward_old, avg(b.reward) AS reward_new,
               count(*) FILTER (WHERE a.reward IS DISTINCT FROM b.reward) AS reward_changed
        FROM rollouts r
        LEFT JOIN verifications a ON a.rollout_id = r.rollout_id AND a.verifier_version = ?
        LEFT JOIN verifications b ON b.rollout_id = r.rollout_id AND b.verifier_version = ?
        GROUP BY r.task_id
        HAVING reward_changed > 0 OR c_old <> c_new OR n_old <> n_new
        ORDER BY abs(c_new - c_old) DESC, r.task_id
        """,
        [old, new],
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
