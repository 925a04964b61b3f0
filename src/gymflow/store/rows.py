"""One row builder per table: every writer (the collector's, the NeMo Gym import, reverify, the
run's registration) builds its rows here, from typed values, in the column order `schema.py`
declares. A column the caller has no value for is NULL (`row`).

JSON columns are written by `dumps` unless the caller passes its own (the NeMo Gym import
writes its JSON with sorted keys, as it always has)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from gymflow.core.records import ModelCall, Rollout, Verification
from gymflow.store.schema import COLUMNS
from gymflow.store.tool_lists import ToolLists

Dumps = Callable[[Any], str]
_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> str:
    """Compact JSON, as `json.dumps(separators=(",", ":"), ensure_ascii=False, default=str)` gives
    it, at a tenth of the cost: trajectories and model calls are most of a flush's work."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        # Integers beyond 64 bits, or a lone surrogate: a model's tool arguments may spell one
        # (`"\ud800"` in its JSON text), parsed into text no UTF-8 store can hold, so one hostile
        # call failed its whole batch's commit. It is kept as U+FFFD.
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
        return _SURROGATE.sub("\ufffd", text)


_NAMES = {table: frozenset(columns) for table, columns in COLUMNS.items()}


def row(table: str, values: Mapping[str, Any]) -> tuple[Any, ...]:
    """A row of `table` in its column order; a name the table does not have is a bug."""
    if not values.keys() <= _NAMES[table]:
        unknown = sorted(values.keys() - _NAMES[table])
        raise KeyError(f"{table} has no column {', '.join(unknown)}")
    return tuple(map(values.get, COLUMNS[table]))


def naive_utc(moment: datetime | None) -> datetime | None:
    """The store's TIMESTAMP columns hold UTC without a zone."""
    return moment if moment is None or moment.tzinfo is None else moment.replace(tzinfo=None)


def run_row(
    *,
    run_id: str,
    created_at: datetime,
    gymflow_version: str,
    config_json: str,
    config_hash: str,
    benchmark: str | None,
    benchmark_version: str,
    environment: str | None,
    dataset_version: str,
    split: str | None,
    model: str | None,
    harness: str,
    prompt_template: str | None,
    sampling_json: str,
    repeats: int,
    shard_count: int,
    verifier_version: str,
) -> tuple[Any, ...]:
    return row("runs", {**locals(), "created_at": naive_utc(created_at)})


def shard_row(run_id: str, shard_index: int, shard_count: int) -> tuple[Any, ...]:
    return row("shards", locals())


def task_row(
    *,
    run_id: str,
    task_id: str,
    task_index: int,
    shard_index: int,
    prompt: str,
    reference: str | None,
    data: Any,
    tags: Iterable[str],
    difficulty: str | None,
    json_of: Dumps,
) -> tuple[Any, ...]:
    values = {k: v for k, v in locals().items() if k not in ("data", "tags", "json_of")}
    return row("tasks", {**values, "data_json": json_of(data), "tags": list(tags)})


# The rollouts, model_calls and verifications rows (three for every rollout collected) are built
# as tuples in the schema's column order, not through `row`: the collector writes thousands a
# second. tests/test_store_schema.py checks each builder's order against the schema.


def rollout_row(
    *,
    rollout_id: str,
    run_id: str,
    task_id: str,
    repeat_index: int,
    seed: int | None,
    status: str,
    failure_kind: str | None,
    error: str | None,
    incomplete: bool,
    output_text: str,
    trajectory: list[dict[str, Any]],
    num_turns: int,
    num_model_calls: int,
    input_tokens: int | None,
    output_tokens: int | None,
    started_at: datetime | None,
    finished_at: datetime | None,
    counters: dict[str, Any],
    json_of: Dumps = dumps,
) -> tuple[Any, ...]:
    """A rollout's row. Without times (an imported rollout: its file keeps none) it stores no
    latency either."""
    timed = started_at is not None and finished_at is not None
    return (
        rollout_id,
        run_id,
        task_id,
        repeat_index,
        seed,
        status,
        failure_kind,
        error,
        incomplete,
        output_text,
        json_of(trajectory),
        num_turns,
        num_model_calls,
        input_tokens,
        output_tokens,
        (finished_at - started_at).total_seconds() if timed else None,
        naive_utc(started_at),
        naive_utc(finished_at),
        json_of(counters),
    )


def rollout_row_of(r: Rollout) -> tuple[Any, ...]:
    """The collector's rollout record as its row."""
    return rollout_row(
        rollout_id=r.rollout_id,
        run_id=r.run_id,
        task_id=r.task_id,
        repeat_index=r.repeat_index,
        seed=r.seed,
        status=r.status,
        failure_kind=r.failure_kind,
        error=r.error,
        incomplete=r.incomplete,
        output_text=r.output_text,
        trajectory=r.trajectory,
        num_turns=r.num_turns,
        num_model_calls=len(r.calls),
        input_tokens=r.input_tokens,
        output_tokens=r.output_tokens,
        started_at=r.started_at,
        finished_at=r.finished_at,
        counters=r.counters,
    )


def model_call_row(
    rollout_id: str, c: ModelCall, tool_lists: ToolLists, *, json_of: Dumps = dumps
) -> tuple[Any, ...]:
    """A model call's row. The tool lists of its request and response are stored once per
    store (`tool_lists`), referenced from the JSON in their place. A response that is not
    JSON (a malformed body) is stored as the text it was."""
    response = c.response if isinstance(c.response, str) else tool_lists.refer(c.response, json_of)
    return (
        rollout_id,
        c.call_index,
        c.attempt,
        c.status,
        c.failure_kind,
        c.http_status,
        c.latency_s,
        c.input_tokens,
        c.cached_tokens,
        c.output_tokens,
        c.reasoning_tokens,
        json_of(c.sampling),
        tool_lists.refer(c.request, json_of),
        response,
        c.error,
    )


def verification_row(
    rollout_id: str, v: Verification, created_at: datetime, *, json_of: Dumps = dumps
) -> tuple[Any, ...]:
    return (
        rollout_id,
        v.verifier_version,
        v.status,
        v.reward,
        v.passed,
        v.failure_kind,
        json_of(v.details),
        naive_utc(created_at),
    )


def verifier_version_row(
    *,
    verifier_version: str,
    verifier_name: str,
    params: dict[str, Any],
    source: str,
    created_at: datetime,
    code_hash: str | None,
) -> tuple[Any, ...]:
    values = {k: v for k, v in locals().items() if k != "params"}
    return row(
        "verifier_versions",
        {**values, "params_json": dumps(params), "created_at": naive_utc(created_at)},
    )
