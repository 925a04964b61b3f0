"""NeMo Gym rollout files in and out of a gymflow store.

A NeMo Gym rollout file holds one JSON object per line and per rollout: `responses_create_params`
(the Responses API request: `input`, tools, sampling), `response` (the Responses API object with
`output` and `usage`), `reward`, `_ng_task_index`, `_ng_rollout_index`, and the task's own fields
(the dataset row: an id, an expected answer, ...).

Import validates every line before anything is written, then stores one run: a task per
`_ng_task_index`, a rollout per row, one model call per rollout (the request and response as
given), and the row's reward as verifier version `imported`. With an environment, each row is
matched to that environment's task (by a `task_id` field, or the environment's own id field), so
the task's data is the environment's and `gym eval reverify` can score the outputs with gymflow's
verifier."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymflow import __version__
from gymflow.environments.base import Environment, Task
from gymflow.environments.registry import RegistryError, load_environment
from gymflow.models.responses import output_text, user_message
from gymflow.records import rollout_id
from gymflow.store.db import StoreError, connect, store_path
from gymflow.store.schema import COLUMNS
from gymflow.store.writer import insert_rows, register_verifier_version

IMPORTED_VERSION = "imported"
RESERVED = ("responses_create_params", "response", "reward", "_ng_task_index", "_ng_rollout_index")
SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens")
MAX_REPORTED = 20


class InteropError(ValueError):
    """A file that cannot be imported or exported; names the file, line and field."""


@dataclass(frozen=True, slots=True)
class NemoRow:
    line: int
    task_index: int
    rollout_index: int
    params: dict[str, Any]
    response: dict[str, Any]
    reward: float
    fields: dict[str, Any]  # the task's own fields: everything not reserved

    @property
    def input_items(self) -> list[dict[str, Any]]:
        given = self.params.get("input", [])
        return [user_message(given)] if isinstance(given, str) else list(given)


def _problems(row: Any) -> list[str]:
    """Every problem of one parsed line, as 'field: what is wrong'."""
    if not isinstance(row, dict):
        return [f"(line): expected a JSON object, got {type(row).__name__}"]
    problems = []
    for key in RESERVED:
        if key not in row:
            problems.append(f"{key}: missing")
    params, response = row.get("responses_create_params"), row.get("response")
    if "responses_create_params" in row:
        if not isinstance(params, dict):
            problems.append("responses_create_params: expected an object")
        elif not isinstance(params.get("input"), (list, str)):
            problems.append("responses_create_params.input: expected a list of items or a string")
    if "response" in row:
        if not isinstance(response, dict):
            problems.append("response: expected an object")
        else:
            if not isinstance(response.get("output"), list):
                problems.append("response.output: expected a list of items")
            usage = response.get("usage")
            if usage is not None and not (
                isinstance(usage, dict)
                and all(
                    isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool)
                    for k in ("input_tokens", "output_tokens")
                )
            ):
                problems.append("response.usage: expected input_tokens and output_tokens integers")
    reward = row.get("reward")
    if "reward" in row and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        problems.append(f"reward: expected a number, got {json.dumps(reward)[:40]}")
    for key in ("_ng_task_index", "_ng_rollout_index"):
        value = row.get(key)
        if key in row and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(f"{key}: expected a non-negative integer, got {json.dumps(value)}")
    return problems


def read_rollouts(path: Path) -> list[NemoRow]:
    """Parse and check every line; raise InteropError listing the problems (file, line, field)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InteropError(f"{path}: cannot read: {exc}") from None
    rows: list[NemoRow] = []
    problems: list[str] = []
    seen: dict[tuple[int, int], int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not JSON: {exc.msg} (column {exc.colno})")
            continue
        found = _problems(row)
        if found:
            problems.extend(f"{path}:{number}: {problem}" for problem in found)
            continue
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        if key in seen:
            problems.append(
                f"{path}:{number}: _ng_rollout_index: task {key[0]} rollout {key[1]} repeats "
                f"line {seen[key]}"
            )
            continue
        seen[key] = number
        rows.append(
            NemoRow(
                line=number,
                task_index=key[0],
                rollout_index=key[1],
                params=row["responses_create_params"],
                response=row["response"],
                reward=float(row["reward"]),
                fields={k: v for k, v in row.items() if k not in RESERVED},
            )
        )
    if not rows and not problems:
        problems.append(f"{path}: no rollouts (empty file)")
    if problems:
        shown = problems[:MAX_REPORTED]
        more = len(problems) - len(shown)
        raise InteropError(
            f"{path}: {len(problems)} problem(s), nothing imported:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    return rows


def _environment_tasks(env: Environment) -> dict[str, Task]:
    tasks: dict[str, Task] = {}
    for split in env.manifest.splits:
        for task in env.tasks(split):
            tasks.setdefault(task.task_id, task)
    return tasks


def _match_tasks(
    path: Path, rows: list[NemoRow], env: Environment | None
) -> dict[int, tuple[str, Task | None]]:
    """_ng_task_index -> (task_id, environment task or None); every problem reported at once."""
    id_fields = ["task_id"] + ([env.manifest.id_field] if env else [])
    known = _environment_tasks(env) if env else {}
    matched: dict[int, tuple[str, Task | None]] = {}
    problems = []
    for row in rows:
        given = next((row.fields[f] for f in id_fields if row.fields.get(f) is not None), None)
        if env is None:
            task_id = str(given) if given is not None else f"ng-{row.task_index:05d}"
            task = None
        elif given is None:
            problems.append(
                f"{path}:{row.line}: {' / '.join(dict.fromkeys(id_fields))}: missing; needed "
                f"to match the row to an {env.name!r} task"
            )
            continue
        elif str(given) not in known:
            problems.append(
                f"{path}:{row.line}: task_id: {given!r} is not a task of environment {env.name!r}"
            )
            continue
        else:
            task_id, task = str(given), known[str(given)]
        previous = matched.setdefault(row.task_index, (task_id, task))
        if previous[0] != task_id:
            problems.append(
                f"{path}:{row.line}: task_id: {task_id!r}, but _ng_task_index {row.task_index} "
                f"was {previous[0]!r} on an earlier line"
            )
    if problems:
        raise InteropError(
            f"{path}: {len(problems)} problem(s), nothing imported:\n  "
            + "\n  ".join(problems[:MAX_REPORTED])
        )
    return matched


def _turns(output: list[dict[str, Any]]) -> int:
    """Model turns in an output: one per run of function calls, plus the final answer."""
    kinds = [item.get("type") for item in output]
    runs = sum(
        1
        for i, kind in enumerate(kinds)
        if kind == "function_call" and (i == 0 or kinds[i - 1] != "function_call")
    )
    return runs + 1


def _first_user_text(items: list[dict[str, Any]]) -> str:
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))
    return ""


def _row(table: str, values: dict[str, Any]) -> tuple:
    """A row tuple in the store's column order; columns the importer has no value for are NULL."""
    return tuple(values.get(column) for column in COLUMNS[table])


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(_dumps(parts).encode()).hexdigest()[:16]


def import_rollouts(
    path: Path,
    out: Path,
    *,
    environment: str | None = None,
    pass_threshold: float | None = None,
) -> dict[str, Any]:
    """Import a NeMo Gym rollout file into a new store at `out`.

    Returns {"run_id", "store", "tasks", "rollouts", "repeats", "environment",
    "verifier_version": "imported", "pass_threshold"}. Raises InteropError (nothing written) for
    a bad file, an unknown environment, unmatched tasks, or an `out` that already holds a store."""
    if store_path(out).exists():
        raise InteropError(f"{store_path(out)}: already holds a store; choose another --out")
    env = None
    if environment is not None:
        try:
            env = load_environment(environment)
        except RegistryError as exc:
            raise InteropError(str(exc)) from None
    rows = read_rollouts(path)
    matched = _match_tasks(path, rows, env)
    threshold = (
        pass_threshold
        if pass_threshold is not None
        else (env.manifest.pass_threshold if env else 1.0)
    )
    first = min(rows, key=lambda r: (r.task_index, r.rollout_index))
    sampling = {k: first.params[k] for k in SAMPLING_KEYS if k in first.params}
    task_ids = sorted(task_id for task_id, _ in matched.values())
    run_id = "ng-" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    repeats = max(r.rollout_index for r in rows) + 1
    now = datetime.now(UTC).replace(tzinfo=None)
    by_task = {}
    for row in sorted(rows, key=lambda r: (r.task_index, r.rollout_index)):
        by_task.setdefault(row.task_index, row)
    task_rows = []
    for index, (task_id, task) in sorted(matched.items()):
        sample = by_task[index]
        prompt = _first_user_text(sample.input_items)
        task_rows.append(
            _row(
                "tasks",
                {
                    "run_id": run_id,
                    "task_id": task_id,
                    "task_index": index,
                    "shard_index": 0,
                    "prompt": prompt,
                    "reference": task.reference if task else None,
                    "data_json": _dumps(task.data if task else sample.fields),
                    "tags": list(task.tags) if task else [],
                    "difficulty": task.difficulty if task else None,
                },
            )
        )
    rollout_rows, call_rows, verification_rows = [], [], []
    for row in rows:
        task_id = matched[row.task_index][0]
        rid = rollout_id(run_id, task_id, row.rollout_index)
        response, usage = row.response, row.response.get("usage") or {}
        output = row.response["output"]
        failed = response.get("status") == "failed" or bool(response.get("error"))
        incomplete = response.get("status") == "incomplete"
        call_sampling = {k: row.params[k] for k in SAMPLING_KEYS if k in row.params}
        rollout_rows.append(
            _row(
                "rollouts",
                {
                    "rollout_id": rid,
                    "run_id": run_id,
                    "task_id": task_id,
                    "repeat_index": row.rollout_index,
                    "seed": row.params.get("seed"),
                    "status": "failed" if failed else "completed",
                    "failure_kind": "model_error" if failed else None,
                    "error": _dumps(response.get("error")) if failed else None,
                    "incomplete": incomplete,
                    "output_text": output_text(output),
                    "trajectory_json": _dumps([*row.input_items, *output]),
                    "num_turns": _turns(output),
                    "num_model_calls": 1,
                    "input_tokens": usage.get("input_tokens"),
                    "output_tokens": usage.get("output_tokens"),
                    "counters_json": "{}",
                },
            )
        )
        call_rows.append(
            _row(
                "model_calls",
                {
                    "rollout_id": rid,
                    "call_index": 0,
                    "attempt": 0,
                    "status": "error" if failed else "incomplete" if incomplete else "completed",
                    "failure_kind": "model_error" if failed else None,
                    "input_tokens": usage.get("input_tokens"),
                    "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens"),
                    "output_tokens": usage.get("output_tokens"),
                    "reasoning_tokens": (usage.get("output_tokens_details") or {}).get(
                        "reasoning_tokens"
                    ),
                    "sampling_json": _dumps(call_sampling),
                    "request_json": _dumps(row.params),
                    "response_json": _dumps(response),
                },
            )
        )
        if not failed:
            verification_rows.append(
                _row(
                    "verifications",
                    {
                        "rollout_id": rid,
                        "verifier_version": IMPORTED_VERSION,
                        "status": "ok",
                        "reward": row.reward,
                        "passed": row.reward >= threshold,
                        "details_json": _dumps({"source": str(path), "line": row.line}),
                        "created_at": now,
                    },
                )
            )
    run_row = _row(
        "runs",
        {
            "run_id": run_id,
            "created_at": now,
            "gymflow_version": __version__,
            "config_json": _dumps({"imported_from": str(path), "format": "nemo-gym"}),
            "config_hash": run_id,
            "benchmark": None,
            "benchmark_version": "nemo-gym-" + _digest(environment, task_ids),
            "environment": environment,
            "dataset_version": _digest(
                [row[COLUMNS["tasks"].index("data_json")] for row in task_rows]
            ),
            "split": None,
            "model": response_model(first),
            "harness": "nemo-gym",
            "prompt_template": None,
            "sampling_json": _dumps(sampling),
            "repeats": repeats,
            "shard_count": 1,
            "verifier_version": IMPORTED_VERSION,
        },
    )
    _write_store(
        out,
        path,
        threshold,
        {
            "runs": [run_row],
            "tasks": task_rows,
            "rollouts": rollout_rows,
            "model_calls": call_rows,
            "verifications": verification_rows,
        },
    )
    return {
        "run_id": run_id,
        "store": str(store_path(out)),
        "tasks": len(task_rows),
        "rollouts": len(rollout_rows),
        "repeats": repeats,
        "environment": environment,
        "verifier_version": IMPORTED_VERSION,
        "pass_threshold": threshold,
    }


def response_model(row: NemoRow) -> str | None:
    return row.response.get("model") or row.params.get("model")


def _write_store(out: Path, source: Path, threshold: float, tables: dict[str, list]) -> None:
    """Create the store and write every table in one transaction; on failure remove the file."""
    target = store_path(out)
    try:
        con = connect(out, create=True)
    except StoreError as exc:
        raise InteropError(str(exc)) from None
    try:
        con.execute("BEGIN TRANSACTION")
        register_verifier_version(
            con,
            IMPORTED_VERSION,
            IMPORTED_VERSION,
            {"file": str(source), "pass_threshold": threshold},
            source=f"nemo-gym import of {source}",
        )
        for table, rows in tables.items():
            insert_rows(con, table, rows)
        con.execute("COMMIT")
    except BaseException:
        con.close()
        target.unlink(missing_ok=True)
        raise
    con.close()


# -- export ------------------------------------------------------------------------------------


def nemo_gym_lines_sql(verifier_version: str) -> tuple[str, list[Any]]:
    """SQL yielding one NeMo Gym JSON line per completed rollout (`line`), with parameters.

    The request is the rollout's first model call; the response's output is the trajectory after
    that request's input, and its usage the rollout's totals; the task's data fields sit beside
    the reserved keys, as in a NeMo Gym dataset row."""
    reserved_removal = _dumps(dict.fromkeys(["task_id", *RESERVED, "verifier_version"]))
    sql = f"""
        WITH first_call AS (
            SELECT rollout_id, arg_min(request_json, call_index * 1000000 + attempt) AS request
            FROM model_calls GROUP BY rollout_id
        ),
        shaped AS (
            SELECT r.rollout_id, r.task_id, r.repeat_index, t.task_index, t.data_json,
                   r.trajectory_json, r.incomplete, r.input_tokens, r.output_tokens,
                   coalesce(c.request, json_object(
                       'input', json_array(json_extract(r.trajectory_json, '$[0]')))) AS request,
                   v.reward, runs.model
            FROM rollouts r
            JOIN tasks t USING (task_id)
            CROSS JOIN runs
            LEFT JOIN first_call c USING (rollout_id)
            LEFT JOIN verifications v
              ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
            WHERE r.status = 'completed'
        )
        SELECT json_merge_patch(
            json_object(
                'responses_create_params', json(request),
                'response', json_object(
                    'id', 'resp_' || rollout_id,
                    'object', 'response',
                    'model', model,
                    'status', CASE WHEN incomplete THEN 'incomplete' ELSE 'completed' END,
                    'output', to_json(json_extract(trajectory_json, '$[*]')[
                        (CASE WHEN json_type(json(request), '$.input') = 'ARRAY'
                              THEN json_array_length(json(request), '$.input') ELSE 1 END) + 1:]),
                    'usage', json_object(
                        'input_tokens', input_tokens,
                        'output_tokens', output_tokens,
                        'total_tokens', input_tokens + output_tokens)),
                'reward', reward,
                'verifier_version', ?,
                '_ng_task_index', task_index,
                '_ng_rollout_index', repeat_index,
                'task_id', task_id),
            json_merge_patch(coalesce(data_json, '{{}}'), '{reserved_removal}')
        )::VARCHAR AS line
        FROM shaped
        ORDER BY task_index, repeat_index
    """
    return sql, [verifier_version, verifier_version]


def iter_lines(con, verifier_version: str, batch: int = 10_000) -> Iterator[str]:
    sql, params = nemo_gym_lines_sql(verifier_version)
    cursor = con.execute(sql, params)
    while rows := cursor.fetchmany(batch):
        yield from (row[0] for row in rows)
