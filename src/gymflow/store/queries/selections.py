"""The SQL of building a dataset from a run: the per-task table a selection filters (pass
counts, pass rate, bucket, mean tokens), the rollouts and prompts of the tasks it keeps, and the
kept tasks written as dataset rows. The selection's own temp tables (`data_tasks`, and
`data_selected`, the kept task ids, which the row statements read) belong to `gymflow.data`."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row
from gymflow.store.queries.scores import task_counts_sql
from gymflow.store.tool_lists import expanded


def task_table_sql(bucket_sql: str) -> str:
    """SQL (one `?`: the verifier version) for one row per task of the run: task_id, tags,
    difficulty, n, c, pass_rate (NULL when nothing is scored), bucket (`bucket_sql` over n and
    c), and mean input and output tokens over its stored rollouts."""
    return f"""
        WITH counts AS ({task_counts_sql()}),
        tokens AS (
            SELECT task_id, avg(input_tokens) AS mean_input_tokens,
                   avg(output_tokens) AS mean_output_tokens
            FROM rollouts GROUP BY task_id
        )
        SELECT k.task_id, k.tags, k.difficulty, k.n, k.c,
               CASE WHEN k.n > 0 THEN k.c / k.n END AS pass_rate,
               {bucket_sql} AS bucket,
               t.mean_input_tokens, t.mean_output_tokens
        FROM counts k LEFT JOIN tokens t USING (task_id)
        """


def rollouts_of(con: Connection, selected: str) -> int:
    """How many stored rollouts the tasks of the temp table `selected` (task_id) have."""
    return one_row(
        con, f"SELECT count(*) FROM rollouts WHERE task_id IN (SELECT task_id FROM {selected})"
    )[0]


def task_prompts_sql(source: str) -> str:
    """SQL for the rows of `source` (a table of task_id, n, c, pass_rate) with each task's
    prompt: task_id, n, c, pass_rate, prompt."""
    return (
        f"SELECT d.task_id, d.n, d.c, d.pass_rate, t.prompt "
        f"FROM {source} d JOIN tasks t USING (task_id)"
    )


# The first attempt of the first model call of each selected task's first stored rollout.
_REQUESTS = f"""
WITH first_rollout AS (
    SELECT task_id, arg_min(rollout_id, repeat_index) AS rollout_id
    FROM rollouts WHERE task_id IN (SELECT task_id FROM data_selected) GROUP BY task_id
)
SELECT task_id, {expanded("request")} AS request
FROM (
    SELECT f.task_id, arg_min(m.request_json, m.attempt) AS request
    FROM first_rollout f JOIN model_calls m ON m.rollout_id = f.rollout_id AND m.call_index = 0
    GROUP BY f.task_id
)
"""

_ROWS = f"""
WITH requests AS ({_REQUESTS}),
parts AS (
    SELECT s.task_id, s.tags, s.difficulty, s.n, s.c, s.pass_rate, s.bucket,
           t.prompt, t.reference, coalesce(t.data_json, '{{}}') AS data_json,
           CASE WHEN coalesce(json_array_length(q.request, '$.input'), 0) > 0
                THEN json_extract(q.request, '$.input')
                ELSE json_array(json_object('type', 'message', 'role', 'user',
                                            'content', t.prompt)) END AS input,
           CASE WHEN coalesce(json_array_length(q.request, '$.tools'), 0) > 0
                THEN json_extract(q.request, '$.tools') END AS tools,
           json_extract_string(q.request, '$.instructions') AS instructions
    FROM data_selected s
    JOIN tasks t USING (task_id)
    LEFT JOIN requests q USING (task_id)
)
"""

#: The selected tasks as NeMo Gym dataset rows, one JSON text each, by task id.
# The patch's null members (no tools, no instructions, no difficulty) are left out; the dataset's
# own fields (the target) and every list (input items, tools) keep theirs.
SELECTION_JSONL = f"""
{_ROWS}
SELECT json_merge_patch(
    data_json,
    json_object(
        'responses_create_params',
        json_object('input', input, 'tools', tools, 'instructions', instructions),
        '_gymflow',
        json_object('task_id', task_id, 'tags', to_json(tags), 'difficulty', difficulty,
                    'reference', reference, 'n', n, 'c', c, 'pass_rate', pass_rate,
                    'bucket', bucket)
    )
)::VARCHAR
FROM parts ORDER BY task_id
"""

#: The selected tasks as a Parquet table's rows, by task id.
SELECTION_PARQUET = f"""
{_ROWS}
SELECT task_id, prompt, input::VARCHAR AS input, tools::VARCHAR AS tools, instructions,
       data_json AS data, tags, difficulty, reference, n, c, pass_rate, bucket
FROM parts ORDER BY task_id
"""


def data_keys(con: Connection) -> list[str]:
    """The verifier-data fields the selected tasks (`data_selected`) carry, sorted."""
    rows = con.execute(
        "SELECT DISTINCT unnest(json_keys(data_json)) AS k FROM tasks "
        "WHERE task_id IN (SELECT task_id FROM data_selected) ORDER BY k"
    ).fetchall()
    return [k for (k,) in rows]
