"""Health of a run's records: can its numbers be trusted? Each check is one SQL query."""

from __future__ import annotations

from typing import Any

#: check name -> (description, SQL yielding the offending rollout ids or keys)
CHECKS: dict[str, tuple[str, str]] = {
    "missing_rollout": (
        "expected (task_id, repeat_index) with no stored rollout",
        """
        SELECT t.task_id || '#' || gs.r AS id
        FROM tasks t
        CROSS JOIN (SELECT range AS r FROM range((SELECT max(repeats) FROM runs))) gs
        ANTI JOIN rollouts ro ON ro.task_id = t.task_id AND ro.repeat_index = gs.r
        """,
    ),
    "no_model_calls": (
        "rollout with no recorded model call",
        """
        SELECT r.rollout_id AS id FROM rollouts r
        ANTI JOIN model_calls m ON m.rollout_id = r.rollout_id
        """,
    ),
}


def health(con, *, max_examples: int = 20) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    for name, (description, sql) in CHECKS.items():
        count, examples = con.execute(
            f"SELECT count(*), list(id ORDER BY id)[1:{max_examples}] FROM ({sql})"
        ).fetchone()
        checks[name] = {"description": description, "count": count, "examples": examples or []}
    total = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
    failing = [name for name, check in checks.items() if check["count"]]
    return {
        "verdict": "unhealthy" if failing else "healthy",
        "rollouts": total,
        "failing_checks": failing,
        "checks": checks,
    }
