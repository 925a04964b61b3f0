"""The SQL of the exports: a run's rollouts as flat rows (JSONL, Parquet), as NeMo Gym's lines
and materialized inputs, as ATIF trajectories with their calls, and the scored verdicts NeMo
Gym's aggregation reads. The NeMo Gym export streams what its cursors return (`fetchmany`),
never a whole store in memory."""

from __future__ import annotations

from typing import Any

from gymflow.store.handle import Connection
from gymflow.store.tool_lists import expanded


def sql_literal(text: str) -> str:
    """`text` as a quoted SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def finite_sql(column: str) -> str:
    """NULL for NaN and ±Infinity, which DuckDB's JSON writer would print as bare NaN."""
    return f"CASE WHEN isfinite({column}) THEN {column} END"


def flat_rollouts_sql(verifier_version: str, nested_json: bool) -> str:
    """One row per stored rollout with its task index and its verification under the version."""
    details = "json(v.details_json)" if nested_json else "v.details_json"
    trajectory = "json(r.trajectory_json)" if nested_json else "r.trajectory_json"
    return f"""
        SELECT r.rollout_id, r.run_id, r.task_id, t.task_index, r.repeat_index, r.status,
               r.failure_kind, r.error, r.incomplete, r.output_text, r.num_turns,
               r.num_model_calls, r.input_tokens, r.output_tokens,
               {finite_sql("r.latency_s")} AS latency_s, r.started_at,
               r.finished_at, v.verifier_version, v.status AS verification_status,
               {finite_sql("v.reward")} AS reward,
               v.passed, v.failure_kind AS verification_failure_kind,
               {details} AS verification_details, {trajectory} AS trajectory
        FROM rollouts r
        LEFT JOIN tasks t USING (task_id)
        LEFT JOIN verifications v
          ON v.rollout_id = r.rollout_id AND v.verifier_version = {sql_literal(verifier_version)}
        ORDER BY t.task_index, r.repeat_index, r.rollout_id
    """


_NEMO_ROLLOUTS = f"""
WITH first_call AS (
    SELECT rollout_id, arg_min(request_json, call_index::BIGINT * 1000000 + attempt) AS request
    FROM model_calls GROUP BY rollout_id
)
SELECT r.rollout_id, r.task_id, r.repeat_index, t.task_index, t.data_json, t.prompt,
       r.trajectory_json, r.status, r.failure_kind, r.error, r.incomplete,
       r.input_tokens, r.output_tokens, epoch(r.started_at), {expanded("c.request")},
       v.status, v.reward, v.failure_kind
FROM rollouts r
JOIN tasks t USING (task_id)
LEFT JOIN first_call c USING (rollout_id)
LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
ORDER BY t.task_index, r.repeat_index, r.rollout_id
"""


def nemo_rollout_rows(con: Connection, verifier_version: str) -> Connection:
    """A cursor over every stored rollout in task and repeat order: its task, first request
    (tool lists expanded) and verdict under `verifier_version` (`interop.nemo_export` reads the
    columns in order)."""
    return con.execute(_NEMO_ROLLOUTS, [verifier_version])


def nemo_task_requests(con: Connection) -> Connection:
    """A cursor over every task in task order: task_index, task_id, data_json, prompt and the
    first request any of its rollouts sent (tool lists expanded)."""
    return con.execute(
        f"""
        SELECT task_index, task_id, data_json, prompt, {expanded("request")}
        FROM (
            SELECT t.task_index, t.task_id, t.data_json, t.prompt,
                   (SELECT arg_min(c.request_json, c.call_index::BIGINT * 1000000 + c.attempt)
                    FROM model_calls c JOIN rollouts r USING (rollout_id)
                    WHERE r.task_id = t.task_id) AS request
            FROM tasks t
        )
        ORDER BY task_index
        """
    )


#: A run's scored verdicts as NeMo Gym's aggregation reads them (its task and rollout indices).
_SCORED_VERDICTS = """
SELECT t.task_index, r.repeat_index, t.data_json, v.reward, v.details_json,
       r.input_tokens, r.output_tokens
FROM rollouts r JOIN tasks t USING (task_id) JOIN verifications v USING (rollout_id)
WHERE v.verifier_version = ? AND v.status = 'ok'
ORDER BY t.task_index, r.repeat_index
"""


def scored_verdicts(con: Connection, verifier_version: str) -> list[tuple[Any, ...]]:
    """Every ok verdict under `verifier_version` as NeMo Gym's aggregation reads it: task_index,
    repeat_index, data_json, reward, details_json, input and output tokens."""
    return con.execute(_SCORED_VERDICTS, [verifier_version]).fetchall()


_ATIF_ROLLOUTS = """
    SELECT r.rollout_id, r.run_id, r.task_id, r.repeat_index, r.status, r.failure_kind,
           r.trajectory_json, r.input_tokens, r.output_tokens, v.reward, v.passed
    FROM rollouts r
    LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
    ORDER BY r.task_id, r.repeat_index, r.rollout_id
"""
_ATIF_CALLS = """
    SELECT rollout_id, call_index, attempt, status, input_tokens, cached_tokens, output_tokens
    FROM model_calls ORDER BY rollout_id, call_index, attempt
"""


def atif_rollout_rows(con: Connection, verifier_version: str) -> list[tuple[Any, ...]]:
    """Every stored rollout with its reward and pass under `verifier_version`: rollout_id,
    run_id, task_id, repeat_index, status, failure_kind, trajectory_json, input and output
    tokens, reward, passed; by task, repeat and id."""
    return con.execute(_ATIF_ROLLOUTS, [verifier_version]).fetchall()


def atif_calls(con: Connection) -> list[tuple[Any, ...]]:
    """Every model call: rollout_id, call_index, attempt, status, input, cached and output
    tokens; by rollout, call and attempt."""
    return con.execute(_ATIF_CALLS).fetchall()
