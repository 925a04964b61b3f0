"""Per-task outcome counts and coverage, straight from SQL over the store."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gymflow.store.db import StoreError


@dataclass(frozen=True, slots=True)
class Coverage:
    """expected = tasks x repeats; scored + failed + missing = expected."""

    expected: int
    scored: int
    failed: int
    missing: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    task_id: str
    n: int  # scored rollouts
    c: int  # passing rollouts
    reward_sum: float


def newest_verifier_version(con) -> str:
    row = con.execute(
        "SELECT verifier_version FROM verifier_versions ORDER BY created_at DESC, "
        "verifier_version LIMIT 1"
    ).fetchone()
    if row is None:
        raise StoreError("store holds no verifier version")
    return row[0]


def check_verifier_version(con, version: str | None) -> str:
    if version is None:
        return newest_verifier_version(con)
    known = [r[0] for r in con.execute("SELECT verifier_version FROM verifier_versions").fetchall()]
    if version not in known:
        raise StoreError(
            f"no verifier version {version!r} in this store (have: {', '.join(known)})"
        )
    return version


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


def task_outcomes(
    con, verifier_version: str, *, failures_as_zero: bool = False
) -> list[TaskOutcome]:
    """(n, c) per task over scored rollouts. Every task in the store appears, n = 0 if none scored.

    With `failures_as_zero`, failed rollouts count as scored and not passed."""
    scored_filter = "TRUE" if failures_as_zero else "v.status = 'ok' AND r.status = 'completed'"
    rows = con.execute(
        f"""
        SELECT t.task_id,
               count(r.rollout_id) FILTER (WHERE {scored_filter}) AS n,
               count(r.rollout_id)
                 FILTER (WHERE {scored_filter} AND coalesce(v.passed, FALSE)) AS c,
               coalesce(sum(v.reward) FILTER (WHERE {scored_filter}), 0) AS reward_sum
        FROM tasks t
        LEFT JOIN rollouts r USING (task_id)
        LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        GROUP BY t.task_id
        ORDER BY t.task_id
        """,
        [verifier_version],
    ).fetchall()
    return [TaskOutcome(task_id, n, c, reward_sum) for task_id, n, c, reward_sum in rows]
