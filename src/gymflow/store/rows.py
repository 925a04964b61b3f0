"""One row builder per table: every writer (the collector's, the NeMo Gym import, reverify, the
run's registration) builds its rows here, from typed values, in the column order `schema.py`
declares. A column the caller has no value for is NULL.

JSON columns are written by `dumps` unless the caller passes its own (the NeMo Gym import
writes its JSON with sorted keys, as it always has)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from gymflow.core.records import ModelCall, Rollout, Verification
from gymflow.store.schema import COLUMNS
from gymflow.store.tool_lists import ToolLists

Dumps = Callable[[Any], str]


def dumps(value: Any) -> str:
    """Compact JSON, as `json.dumps(separators=(",", ":"), ensure_ascii=False, default=str)` gives
    it, at a tenth of the cost: trajectories and model calls are most of a flush's work."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:  # integers beyond 64 bits, which untrusted output may hold
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def row(table: str, values: Mapping[str, Any]) -> tuple:
    """A row of `table` in its column order; a name the table does not have is a bug."""
    columns = COLUMNS[table]
    unknown = values.keys() - set(columns)
    if unknown:
        raise KeyError(f"{table} has no column {', '.join(sorted(unknown))}")
    return tuple(values.get(column) for column in columns)


def naive_utc(moment: datetime | None) -> datetime | None:
    """The store's TIMESTAMP columns hold UTC without a zone."""
    return None if moment is None else moment.replace(tzinfo=None)


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
) -> tuple:
    return row("runs", {**locals(), "created_at": naive_utc(created_at)})


def shard_row(run_id: str, shard_index: int, shard_count: int) -> tuple:
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
) -> tuple:
    values = {k: v for k, v in locals().items() if k not in ("data", "tags", "json_of")}
    return row("tasks", {**values, "data_json": json_of(data), "tags": list(tags)})


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
) -> tuple:
    """A rollout's row. Without times (an imported rollout: its file keeps none) it stores no
    latency either."""
    timed = started_at is not None and finished_at is not None
    values = {
        k: v for k, v in locals().items() if k not in ("trajectory", "counters", "json_of", "timed")
    }
    return row(
        "rollouts",
        {
            **values,
            "trajectory_json": json_of(trajectory),
            "latency_s": (finished_at - started_at).total_seconds() if timed else None,
            "started_at": naive_utc(started_at),
            "finished_at": naive_utc(finished_at),
            "counters_json": json_of(counters),
        },
    )


def rollout_row_of(r: Rollout) -> tuple:
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
) -> tuple:
    """A model call's row. The tool lists of its request and response are stored once per
    store (`tool_lists`), referenced from the JSON in their place. A response that is not
    JSON (a malformed body) is stored as the text it was."""
    response = c.response if isinstance(c.response, str) else tool_lists.refer(c.response, json_of)
    return row(
        "model_calls",
        {
            "rollout_id": rollout_id,
            "call_index": c.call_index,
            "attempt": c.attempt,
            "status": c.status,
            "failure_kind": c.failure_kind,
            "http_status": c.http_status,
            "latency_s": c.latency_s,
            "input_tokens": c.input_tokens,
            "cached_tokens": c.cached_tokens,
            "output_tokens": c.output_tokens,
            "reasoning_tokens": c.reasoning_tokens,
            "sampling_json": json_of(c.sampling),
            "request_json": tool_lists.refer(c.request, json_of),
            "response_json": response,
            "error": c.error,
        },
    )


def verification_row(
    rollout_id: str, v: Verification, created_at: datetime, *, json_of: Dumps = dumps
) -> tuple:
    return row(
        "verifications",
        {
            "rollout_id": rollout_id,
            "verifier_version": v.verifier_version,
            "status": v.status,
            "reward": v.reward,
            "passed": v.passed,
            "failure_kind": v.failure_kind,
            "details_json": json_of(v.details),
            "created_at": naive_utc(created_at),
        },
    )


def verifier_version_row(
    *,
    verifier_version: str,
    verifier_name: str,
    params: dict[str, Any],
    source: str,
    created_at: datetime,
    code_hash: str | None,
) -> tuple:
    values = {k: v for k, v in locals().items() if k != "params"}
    return row(
        "verifier_versions",
        {**values, "params_json": dumps(params), "created_at": naive_utc(created_at)},
    )
