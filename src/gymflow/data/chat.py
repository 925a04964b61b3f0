"""Trajectories as chat-format training data: OpenAI fine-tuning JSONL (`{"messages": [...],
"tools": [...]}`, assistant `tool_calls`, `tool` messages) and Parquet.

Responses API items map to chat messages in SQL: a `message` keeps its role (`developer` becomes
`system`) and its text; a `function_call` becomes a tool call of the assistant message it follows
(or of a new assistant message); a `function_call_output` becomes a `tool` message; `reasoning`
items are dropped (no chat fine-tuning format carries them). The prompt is every message before
the first assistant message; the completion is the rest."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from gymflow.analysis.health import health
from gymflow.core.written import written
from gymflow.data.lines import copy_to, make_folder, write_lines
from gymflow.data.provenance import parquet_metadata_sql, sidecar_path, sidecar_text
from gymflow.store.tool_lists import expanded

Kind = Literal["passing", "pairs"]
KINDS: tuple[Kind, ...] = ("passing", "pairs")


@dataclass(frozen=True, slots=True)
class TrajectoryFilters:
    """Which scored rollouts of the selected tasks are exported.

    `healthy`: drop every rollout a health check flags (integrity or warning). `max_output_tokens`:
    drop rollouts whose output tokens (summed over their model calls) exceed it. `dedup`: keep one
    of the rollouts of a task whose completions are identical (the lowest repeat)."""

    healthy: bool = True
    max_output_tokens: int | None = None
    dedup: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# One row per kept item. The previous item comes from the list itself (a second list unnested
# beside the first) and the prompt's end from a list search, so only one window remains.
_ITEMS = """
CREATE OR REPLACE TEMP TABLE chat_items AS
WITH picked AS (
    SELECT rollout_id, items,
           coalesce(nullif(list_position(list_transform(items, lambda x:
               coalesce(x->>'type', 'message') <> 'message' OR x->>'role' = 'assistant'), true),
               0), len(items) + 1) - 1 AS replies_from
    FROM (SELECT r.rollout_id, json_extract(r.trajectory_json, '$[*]') AS items
          FROM rollouts r SEMI JOIN data_rollouts d USING (rollout_id))
),
flat AS (
    SELECT rollout_id, replies_from, unnest(items) AS item,
           unnest([NULL::JSON] || items[1:len(items) - 1]) AS before,
           unnest(range(len(items))) AS i
    FROM picked
),
typed AS (
    SELECT rollout_id, i, i < replies_from AS in_prompt, item,
           coalesce(item->>'type', 'message') AS type,
           -- a function_call right after an assistant message or another call joins it
           coalesce(item->>'type', 'message') = 'function_call'
             AND (before->>'type' = 'function_call'
                  OR (coalesce(before->>'type', 'message') = 'message'
                      AND before->>'role' = 'assistant')) AS joins
    FROM flat
)
SELECT rollout_id, i, in_prompt, type,
       max(CASE WHEN NOT joins THEN i END)
         OVER (PARTITION BY rollout_id ORDER BY i ROWS UNBOUNDED PRECEDING) AS m,
       CASE type WHEN 'function_call' THEN 'assistant'
                 WHEN 'function_call_output' THEN 'tool'
                 ELSE replace(item->>'role', 'developer', 'system') END AS role,
       CASE type
         WHEN 'message' THEN
           CASE WHEN json_type(item, '$.content') = 'VARCHAR' THEN item->>'content'
                ELSE array_to_string(json_extract_string(item, '$.content[*].text'), '') END
         WHEN 'function_call_output' THEN
           CASE WHEN json_type(item, '$.output') = 'VARCHAR' THEN item->>'output'
                ELSE json_extract(item, '$.output')::VARCHAR END
       END AS content,
       CASE WHEN type = 'function_call' THEN json_object(
           'id', item->>'call_id', 'type', 'function',
           'function', json_object('name', item->>'name', 'arguments', item->>'arguments'))
       END AS tool_call,
       CASE WHEN type = 'function_call_output' THEN item->>'call_id' END AS tool_call_id
FROM typed
WHERE type IN ('message', 'function_call', 'function_call_output')
"""

_MESSAGES = """
CREATE OR REPLACE TEMP TABLE chat_messages AS
WITH grouped AS (
    SELECT rollout_id, m, bool_and(in_prompt) AS in_prompt, first(role ORDER BY i) AS role,
           string_agg(content, '' ORDER BY i) AS content,
           list(tool_call ORDER BY i) FILTER (WHERE tool_call IS NOT NULL) AS tool_calls,
           first(tool_call_id ORDER BY i) AS tool_call_id
    FROM chat_items GROUP BY rollout_id, m
)
SELECT rollout_id, m, in_prompt,
       CASE
         WHEN role = 'tool' THEN json_object('role', 'tool', 'tool_call_id', tool_call_id,
                                             'content', coalesce(content, ''))
         WHEN len(tool_calls) > 0 THEN json_object('role', 'assistant', 'content', content,
                                                   'tool_calls', to_json(tool_calls))
         ELSE json_object('role', role, 'content', coalesce(content, ''))
       END::VARCHAR AS message
FROM grouped
"""

# The tools a task offers are the same in every repeat (the environment gives them per task):
# read them once per task, from its first kept rollout's first call.
_TOOLS = (
    """
CREATE OR REPLACE TEMP TABLE chat_tools AS
WITH first_calls AS (
    SELECT task_id, """
    + expanded("request")
    + """ AS request
    FROM (
        SELECT arg_min(m.request_json, d.repeat_index * 1000 + m.attempt) AS request, d.task_id
        FROM data_rollouts d JOIN model_calls m
          ON m.rollout_id = d.rollout_id AND m.call_index = 0
         AND d.repeat_index = (SELECT min(repeat_index) FROM data_rollouts x
                               WHERE x.task_id = d.task_id)
        GROUP BY d.task_id
    )
)
SELECT task_id,
       to_json(list_transform(
           list_filter(json_extract(request, '$.tools[*]'), lambda t: t->>'type' = 'function'),
           lambda t: json_object('type', 'function', 'function', json_object(
               'name', t->>'name', 'description', coalesce(t->>'description', ''),
               'parameters', coalesce(json_extract(t, '$.parameters'),
                                      '{"type": "object", "properties": {}}'::JSON)))
       ))::VARCHAR AS tools
FROM first_calls
"""
)

_CONVERSATIONS = """
CREATE OR REPLACE TEMP TABLE chat_conversations AS
WITH joined AS (
    SELECT rollout_id,
           '[' || string_agg(message, ',' ORDER BY m) || ']' AS messages,
           '[' || coalesce(string_agg(message, ',' ORDER BY m) FILTER (WHERE in_prompt), '')
               || ']' AS prompt,
           '[' || coalesce(string_agg(message, ',' ORDER BY m) FILTER (WHERE NOT in_prompt), '')
               || ']' AS completion
    FROM chat_messages GROUP BY rollout_id
)
SELECT d.*, j.messages, j.prompt, j.completion,
       CASE WHEN coalesce(t.tools, '[]') <> '[]' THEN t.tools END AS tools
FROM data_rollouts d JOIN joined j USING (rollout_id) LEFT JOIN chat_tools t USING (task_id)
WHERE j.completion <> '[]'
"""


# `json_merge_patch` drops a key whose value is null: no "tools" key when none were offered.
_WITH_TOOLS = (
    "json_merge_patch(json_object('messages', json({})), json_object('tools', json(tools)))"
)

_PASSING_JSONL = f"""
SELECT {_WITH_TOOLS.format("messages")}::VARCHAR
FROM chat_export WHERE passed ORDER BY task_id, repeat_index
"""

# OpenAI's preference fine-tuning format: the shared prompt, then the two continuations.
_PAIRS = """
WITH ranked AS (
    SELECT *, row_number() OVER (PARTITION BY task_id, passed ORDER BY repeat_index) AS k
    FROM chat_export
)
SELECT p.task_id, p.rollout_id AS preferred_rollout_id, f.rollout_id AS non_preferred_rollout_id,
       p.prompt, p.tools, p.completion AS preferred, f.completion AS non_preferred
FROM ranked p JOIN ranked f ON f.task_id = p.task_id AND f.k = p.k AND NOT f.passed
WHERE p.passed
"""

_PAIRS_JSONL = f"""
SELECT json_object('input', {_WITH_TOOLS.format("prompt")},
                   'preferred_output', json(preferred),
                   'non_preferred_output', json(non_preferred))::VARCHAR
FROM ({_PAIRS}) ORDER BY task_id, preferred_rollout_id
"""

_MESSAGE_TYPE = (
    '[{"role": "VARCHAR", "content": "VARCHAR", "tool_call_id": "VARCHAR", '
    '"tool_calls": [{"id": "VARCHAR", "type": "VARCHAR", '
    '"function": {"name": "VARCHAR", "arguments": "VARCHAR"}}]}]'
)


def _typed(column: str) -> str:
    return f"json_transform({column}, '{_MESSAGE_TYPE}') AS {column}"


_PASSING_PARQUET = f"""
SELECT rollout_id, task_id, repeat_index, reward, output_tokens, {_typed("messages")}, tools
FROM chat_export WHERE passed ORDER BY task_id, repeat_index
"""

_PAIRS_PARQUET = f"""
SELECT task_id, preferred_rollout_id, non_preferred_rollout_id, {_typed("prompt")}, tools,
       {_typed("preferred")}, {_typed("non_preferred")}
FROM ({_PAIRS}) ORDER BY task_id, preferred_rollout_id
"""


def prepare_trajectories(con, verifier_version: str, filters: TrajectoryFilters) -> dict[str, int]:
    """Build `chat_export` (one row per kept scored rollout of the `data_selected` tasks: ids,
    passed, reward, messages / prompt / completion / tools as JSON text) and return how many
    rollouts each step kept or dropped."""
    flagged = "SELECT NULL::VARCHAR AS id WHERE FALSE"
    if filters.healthy:
        health(con, verifier_version=verifier_version, max_listed=0)
        flagged = "SELECT DISTINCT id FROM health_hits"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE data_scored AS
        SELECT r.rollout_id, r.task_id, r.repeat_index, v.passed, v.reward, r.output_tokens,
               r.rollout_id IN ({flagged}) AS flagged, md5(r.trajectory_json) AS raw
        FROM rollouts r
        JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.task_id IN (SELECT task_id FROM data_selected)
          AND r.status = 'completed' AND v.status = 'ok'
        """,
        [verifier_version],
    )
    limit = filters.max_output_tokens

    def once(key: str) -> str:
        """Keep the lowest repeat of a task's rollouts sharing `key`, when deduplicating."""
        if not filters.dedup:
            return ""
        return f"QUALIFY row_number() OVER (PARTITION BY task_id, {key} ORDER BY repeat_index) = 1"

    # Identical stored trajectories are identical completions: dropped before the conversion,
    # the rest (ids differ, texts agree) after it.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE data_rollouts AS SELECT * EXCLUDE (flagged, raw) "
        f"FROM data_scored WHERE NOT flagged AND (? IS NULL OR output_tokens <= ?) {once('raw')}",
        [limit, limit],
    )
    for sql in (_ITEMS, _MESSAGES, _TOOLS, _CONVERSATIONS):
        con.execute(sql)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE chat_export AS SELECT * FROM chat_conversations "
        + once("md5(completion)")
    )
    scored, unhealthy, too_long, converted, conversations, kept, passing = con.execute(
        f"""
        SELECT (SELECT count(*) FROM data_scored),
               (SELECT count(*) FROM data_scored WHERE flagged),
               (SELECT count(*) FROM data_scored WHERE NOT flagged
                  AND {"FALSE" if limit is None else f"output_tokens > {int(limit)}"}),
               (SELECT count(*) FROM data_rollouts),
               (SELECT count(*) FROM chat_conversations),
               (SELECT count(*) FROM chat_export),
               (SELECT count(*) FROM chat_export WHERE passed)
        """
    ).fetchone()
    candidates = scored - unhealthy - too_long
    return {
        "scored_rollouts": scored,
        "dropped_unhealthy": unhealthy,
        "dropped_too_long": too_long,
        "dropped_empty": converted - conversations,
        "dropped_duplicates": candidates - converted + conversations - kept,
        "kept_rollouts": kept,
        "kept_passing": passing,
        "kept_failing": kept - passing,
    }


def write_trajectories(
    con, kind: Kind, path: Path, record: dict[str, Any], *, parquet: bool
) -> int:
    """Write the prepared `chat_export` as `kind` (`passing`: one conversation per passing
    rollout; `pairs`: a passing and a failing rollout of the same task, matched in repeat order)
    to `path` (JSONL with a `.meta.json` sidecar, or Parquet with the record in its metadata).
    Returns the rows written."""
    if kind not in KINDS:
        raise ValueError(f"unknown trajectory kind {kind!r} (kinds: {', '.join(KINDS)})")
    make_folder(path.parent)
    if parquet:
        sql = _PASSING_PARQUET if kind == "passing" else _PAIRS_PARQUET
        with written(path) as (partial,):
            return copy_to(con, sql, partial, f"FORMAT parquet, {parquet_metadata_sql(record)}")
    with written(path, sidecar_path(path)) as (lines, sidecar):
        rows = write_lines(con, _PASSING_JSONL if kind == "passing" else _PAIRS_JSONL, [], lines)
        sidecar.write_text(sidecar_text(record), encoding="utf-8")
    return rows
