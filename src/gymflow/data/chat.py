"""Trajectories as chat-format training data: OpenAI fine-tuning JSONL (`{"messages": [...],
"tools": [...]}`, assistant `tool_calls`, `tool` messages) and Parquet.

Responses API items map to chat messages in SQL (`gymflow.store.queries.chat`): a `message`
keeps its role (`developer` becomes `system`) and its text; a `function_call` becomes a tool call
of the assistant message it follows (or of a new assistant message); a `function_call_output`
becomes a `tool` message; `reasoning` items are dropped (no chat fine-tuning format carries
them). The prompt is every message before the first assistant message; the completion is the
rest."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from gymflow.analysis.health import health
from gymflow.core.written import written
from gymflow.data.lines import copy_to, make_folder, write_lines
from gymflow.data.provenance import parquet_metadata_sql, sidecar_path, sidecar_text
from gymflow.store.queries.chat import CHAT_STATEMENTS, scored_rollouts_sql

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
        f"CREATE OR REPLACE TEMP TABLE data_scored AS {scored_rollouts_sql(flagged)}",
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
    for sql in CHAT_STATEMENTS:
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
