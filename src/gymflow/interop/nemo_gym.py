"""Importing a NeMo Gym rollout file (and the files NeMo Gym writes beside it) into a new store.

Tasks: with `_ng_task_index`, a task per index; without (older NeMo Gym versions), rows are the
same task when their task content is equal: the request's input, instructions and tools (not its
sampling settings) and the row's task fields (`is_task_field`: ids, and the text and structured
fields a verifier does not add); rollouts are then numbered in file order. A task's id is the
row's own `task_id` / `id` / `uuid` (or, with an environment, its id field), else a hash of that
content, so two imports of different subsets of one dataset pair on `task_id`.
`<stem>_materialized_inputs.jsonl` adds every task and rollout that was asked for (a rollout with
no line anywhere is then missing, as health reports), and `<stem>_failures.jsonl` adds failed
rollouts with their attempts.

Each rollout keeps its request and response as given (one model-call record, the evidence the
file holds); its model calls are counted as the assistant turns in its output. A refusal is a
failed rollout of kind `refused`, a failed response one of kind `model_error`: neither is scored.
A (task, rollout) pair that appears twice is imported twice, under two rollout ids, so health
reports it as a duplicate. Rewards are stored as verifier version `imported`; with an
environment, each task is matched to that environment's own task so `gym eval reverify` can
score the outputs with gymflow's verifier."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymflow import __version__
from gymflow.core.records import ModelCall, Verification, rollout_id
from gymflow.core.statuses import VERIFY_ERROR
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment
from gymflow.environments.registry import RegistryError, load_environment
from gymflow.interop.nemo_read import (
    InteropError,
    NemoRow,
    raise_problems,
    read_lines,
    sidecar_path,
)
from gymflow.interop.staging import staged_store
from gymflow.models.responses import output_text, refusal_text, unanswered
from gymflow.store.db import store_path
from gymflow.store.rows import model_call_row, rollout_row, run_row, task_row, verification_row
from gymflow.store.schema import COLUMNS
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.sealed_inputs import IMPORTED_VERSION
from gymflow.store.tool_lists import ToolLists
from gymflow.store.writer import (
    insert_rows,
    insert_tool_lists,
    insert_verdicts,
    judged_of,
    register_verifier_version,
)

SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens")
#: The parts of a request that are the task itself; the rest are sampling and transport settings.
TASK_PARAMS = ("input", "instructions", "tools", "tool_choice", "text", "prompt")
ID_FIELDS = ("task_id", "id", "uuid")
#: What NeMo Gym verifiers add to a row (per rollout), seen across the files it ships.
OUTPUT_PREFIXES = ("extracted_", "predicted_", "pred_", "judge_", "model_", "generated_", "parsed_")
OUTPUT_FIELDS = ("generation", "completion", "error_message", "error_class", "failure_reason")
#: NeMo Gym's failure classes (its `_ng_failure_class`) as gymflow failure kinds.
FAILURE_CLASSES = {
    "timeout_exceeded": "timeout",
    "transient": "verifier_error",
    "skipped": "skipped",
    "legitimate": "harness_error",
}

__all__ = ["IMPORTED_VERSION", "InteropError", "import_rollouts"]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(_dumps(parts).encode()).hexdigest()[:16]


def is_task_field(key: str, value: Any) -> bool:
    """Whether a row's field describes its task rather than one rollout's grading: ids always;
    not numbers and booleans (a verifier's scores) nor the outputs NeMo Gym verifiers name
    `extracted_*`, `predicted_*`, `judge_*`, ...; other text and structured fields."""
    if key in ID_FIELDS or key.endswith("_id") or key == "seed":
        return True
    if value is None or isinstance(value, bool | int | float):
        return False
    return not key.startswith(OUTPUT_PREFIXES) and key not in OUTPUT_FIELDS


def task_content(row: NemoRow) -> str:
    """What makes two rows the same task: the request's task parts (not its sampling settings)
    and the row's task fields."""
    request = {k: row.params[k] for k in TASK_PARAMS if row.params.get(k) is not None}
    fields = {k: v for k, v in row.fields.items() if is_task_field(k, v)}
    return _dumps([request, fields])


def model_turns(output: list[dict[str, Any]]) -> int:
    """Model calls behind an output: one per run of model-written items (reasoning, assistant
    messages, function calls) between the tool results and user turns the harness added."""
    turns, inside = 0, False
    for item in output:
        kind = item.get("type")
        own = kind in ("function_call", "reasoning") or (
            kind == "message" and item.get("role", "assistant") == "assistant"
        )
        turns += own and not inside
        inside = own
    return max(turns, 1)


def _usage(response: dict[str, Any] | None) -> dict[str, int | None]:
    """Token counts from Responses usage or chat-completions usage; None where absent."""
    usage = (response or {}).get("usage") or {}
    inputs = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
    outputs = usage.get("output_tokens_details") or usage.get("completion_tokens_details") or {}
    first = usage.get("input_tokens")
    last = usage.get("output_tokens")
    return {
        "input_tokens": first if first is not None else usage.get("prompt_tokens"),
        "output_tokens": last if last is not None else usage.get("completion_tokens"),
        "cached_tokens": inputs.get("cached_tokens") if isinstance(inputs, dict) else None,
        "reasoning_tokens": outputs.get("reasoning_tokens") if isinstance(outputs, dict) else None,
    }


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # completed | failed
    failure_kind: str | None
    error: str | None
    incomplete: bool


def outcome(row: NemoRow) -> Outcome:
    """A rollout line's outcome: refusals, failed and never-run responses are failures."""
    response = row.response or {}
    output = row.output
    status = response.get("status")
    if row.failure_class is not None and isinstance(row.fields.get("gymflow_verification"), dict):
        # a gymflow export's completed rollout whose grading failed: completed, not scored
        return Outcome("completed", None, None, status == "incomplete")
    if row.failure_class is not None:
        given = row.fields.get("gymflow_failure_kind")
        kind = (
            given
            if isinstance(given, str) and given
            else FAILURE_CLASSES.get(row.failure_class, "harness_error")
        )
        message = row.fields.get("error_message") or row.failure_class
        return Outcome("failed", kind, f"NeMo Gym {row.failure_class}: {message}"[:2000], False)
    refusal = refusal_text(output)
    details = response.get("incomplete_details")
    if refusal is None and isinstance(details, dict) and details.get("reason") == "content_filter":
        # withheld on content grounds, whatever part of an answer came first: a refusal, as the
        # model client reads the same response
        refusal = "no answer: incomplete, content_filter"
    if refusal is not None:
        return Outcome("failed", "refused", f"the model refused: {refusal}"[:2000], False)
    if status == "failed" or response.get("error"):
        return Outcome("failed", "model_error", _dumps(response.get("error"))[:2000], False)
    not_run = unanswered(status, output)
    if not_run is not None:  # scored by NeMo Gym, but no answer: read as the model client reads it
        reward = f" (NeMo Gym's reward: {row.reward!r})" if row.reward is not None else ""
        return Outcome("failed", "response_not_run", f"{not_run}{reward}", False)
    return Outcome("completed", None, None, status == "incomplete")


@dataclass(slots=True)
class _Task:
    index: int
    sample: NemoRow  # the materialized input when there is one, else the first line
    source: Path  # the file the sample is a line of
    task_id: str = ""
    env_task: Task | None = None

    @property
    def data(self) -> dict[str, Any]:
        """The task's fields: a materialized input is the dataset row itself; a rollout line
        also holds what its verifier added, kept with that rollout's verification instead."""
        fields = self.sample.fields
        nested = fields.get("task")
        if isinstance(nested, dict) and "verifier_version" in fields:
            return nested  # a gymflow export nests them under `task`
        if self.sample.response is None:
            return fields
        return {k: v for k, v in fields.items() if is_task_field(k, v) or k == "tags"}


def _number(path: Path, rows: list[NemoRow]) -> list[tuple[tuple[int, int], NemoRow]]:
    """Every line with its (task index, rollout index): its own, or by content in file order."""
    indexed = [row.key is not None for row in rows]
    if all(indexed):
        return [(row.key, row) for row in rows]  # type: ignore[misc]
    if any(indexed):
        first = indexed.index(not indexed[0])
        raise_problems(
            path,
            [
                f"{path}:{rows[first].line}: _ng_task_index: present on some lines and not on "
                f"others (line {rows[0].line} {'has' if indexed[0] else 'lacks'} it)"
            ],
        )
    tasks: dict[str, int] = {}
    seen: Counter[int] = Counter()
    numbered = []
    for row in rows:
        task = tasks.setdefault(task_content(row), len(tasks))
        numbered.append(((task, seen[task]), row))
        seen[task] += 1
    return numbered


def _check_tasks(path: Path, tasks: dict[int, _Task], rows: list[NemoRow]) -> None:
    """A task is its sample (its materialized input, else its first line: its prompt is stored
    from there): a line of `path` under the same `_ng_task_index` whose first user message is
    another's belongs to another task (two files concatenated, each numbered from 0), and would
    be graded, or failed, as this one. (The inputs themselves differ in form: NeMo Gym adds
    `type` and other fields to the items.)"""
    problems = []
    for row in rows:
        task = tasks[row.task_index]  # type: ignore[index]
        given = task.sample
        if _first_user_text(row.input_items) != _first_user_text(given.input_items):
            problems.append(
                f"{path}:{row.line}: responses_create_params.input: its user message is not "
                f"that of task {task.index} in {task.source.name} (line {given.line})"
            )
    raise_problems(path, problems)


def _task_ids(path: Path, tasks: dict[int, _Task], env: Environment | None) -> None:
    """Give every task its id (and, with an environment, its environment task)."""
    own = (env.manifest.id_field,) if env else ()
    id_fields = list(dict.fromkeys([*own, *ID_FIELDS]))
    known = _environment_tasks(env) if env else {}
    problems, used = [], Counter()
    for task in tasks.values():
        given = next((task.sample.fields[f] for f in id_fields if f in task.sample.fields), None)
        if env is not None:
            if given is None:
                problems.append(
                    f"{path}:{task.sample.line}: {' / '.join(id_fields)}: missing; needed to "
                    f"match the row to an {env.name!r} task"
                )
            elif str(given) not in known:
                problems.append(
                    f"{path}:{task.sample.line}: task_id: {given!r} is not a task of "
                    f"environment {env.name!r}"
                )
            else:
                task.task_id, task.env_task = str(given), known[str(given)]
            continue
        content_id = "ng-" + _digest(task_content(task.sample))
        task.task_id = str(given) if given is not None else content_id
    raise_problems(path, problems)
    # Two task indices with the same content (a dataset row given twice) stay two tasks.
    for task in sorted(tasks.values(), key=lambda t: t.index):
        used[task.task_id] += 1
        if used[task.task_id] > 1:
            task.task_id = f"{task.task_id}#{task.index}"


def _environment_tasks(env: Environment) -> dict[str, Task]:
    tasks: dict[str, Task] = {}
    for split in env.manifest.splits:
        for task in env.tasks(split):
            tasks.setdefault(task.task_id, task)
    return tasks


def _first_user_text(items: list[dict[str, Any]]) -> str:
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text") or "" for part in content or ())
    return ""


def _tags(fields: dict[str, Any]) -> list[str]:
    tags = fields.get("tags")
    if isinstance(tags, str):
        return [tags]
    return [str(t) for t in tags] if isinstance(tags, list) else []


def _check_out(out: Path) -> None:
    if store_path(out).exists():
        raise InteropError(f"{store_path(out)}: already holds a store; choose another --out")
    if out.exists() and not out.is_dir():
        raise InteropError(f"{out}: exists and is not a folder; --out names the run folder to make")


def import_rollouts(
    path: Path,
    out: Path,
    *,
    environment: str | None = None,
    pass_threshold: float | None = None,
) -> dict[str, Any]:
    """Import a NeMo Gym rollout file (and its sidecars) into a new store at `out`.

    Returns {"run_id", "store", "tasks", "rollouts", "failed", "duplicates", "missing",
    "repeats", "environment", "verifier_version", "pass_threshold", "sidecars"}. Raises
    InteropError (nothing written) for a bad file, an unknown environment, unmatched tasks, or an
    `out` that already holds a store."""
    path, out = Path(path), Path(out)
    if pass_threshold is not None and not math.isfinite(pass_threshold):
        # NaN would fail every rollout (reward >= NaN is false), -inf pass every one
        raise InteropError(f"--pass-threshold: {pass_threshold} is not a finite number")
    _check_out(out)
    env = None
    if environment is not None:
        try:
            env = load_environment(environment)
        except RegistryError as exc:
            raise InteropError(str(exc)) from None
    numbered = _number(path, read_lines(path))
    indexed = numbered[0][1].key is not None
    sidecars = {
        name: sidecar_path(path, suffix)
        for name, suffix in (
            ("materialized_inputs", "_materialized_inputs"),
            ("failures", "_failures"),
        )
        if indexed and sidecar_path(path, suffix).exists()
    }
    materialized = (
        read_lines(sidecars["materialized_inputs"], needs_result=False, sidecar=True)
        if "materialized_inputs" in sidecars
        else []
    )
    failures = read_lines(sidecars["failures"], sidecar=True) if "failures" in sidecars else []
    tasks: dict[int, _Task] = {}
    for row in materialized:
        tasks.setdefault(
            row.task_index,  # type: ignore[arg-type]
            _Task(row.task_index, row, sidecars["materialized_inputs"]),  # type: ignore[arg-type]
        )
    for (task_index, _), row in numbered:
        tasks.setdefault(task_index, _Task(task_index, row, path))
    for row in failures:
        tasks.setdefault(
            row.task_index,  # type: ignore[arg-type]
            _Task(row.task_index, row, sidecars["failures"]),  # type: ignore[arg-type]
        )
    if indexed:  # without indices, rows are numbered by their content: one question a task
        _check_tasks(path, tasks, [row for _, row in numbered])
        if failures:
            _check_tasks(sidecars["failures"], tasks, failures)
    _task_ids(path, tasks, env)
    threshold = (
        pass_threshold
        if pass_threshold is not None
        else (env.manifest.pass_threshold if env else 1.0)
    )
    expected = {row.key for row in materialized}
    done = {key for key, _ in numbered}
    attempts: dict[tuple[int, int], list[NemoRow]] = {}
    for row in failures:
        if row.key not in done:
            attempts.setdefault(row.key, []).append(row)  # type: ignore[arg-type]
    keys = expected | done | set(attempts)
    repeats = max(r for _, r in keys) + 1
    first = numbered[0][1]
    with path.open("rb") as handle:
        run_id = "ng-" + hashlib.file_digest(handle, "sha256").hexdigest()[:16]
    now = datetime.now(UTC).replace(tzinfo=None)
    tool_lists = ToolLists()
    tables = _records(run_id, now, path, tasks, numbered, attempts, threshold, tool_lists)
    agent = first.agent_ref or next((r.agent_ref for r in materialized if r.agent_ref), None)
    sampling = {k: first.params[k] for k in SAMPLING_KEYS if first.params.get(k) is not None}
    exported = _exported_benchmark([row for _, row in numbered])
    task_rows = tables["tasks"]
    tables["runs"] = [
        run_row(
            run_id=run_id,
            created_at=now,
            gymflow_version=__version__,
            config_json=_dumps(
                {
                    "imported_from": str(path),
                    "format": "nemo-gym",
                    "agent_ref": agent,
                    "sidecars": {k: str(v) for k, v in sidecars.items()},
                }
            ),
            config_hash=run_id,
            benchmark=exported["name"] if exported else None,
            # The protocol, not the rows a file happened to hold: two imports of different
            # subsets of one benchmark compare, paired on their common tasks. A gymflow export
            # states its run's benchmark version: its import compares with that run.
            benchmark_version=exported["version"]
            if exported
            else "nemo-gym-"
            + _digest(environment, (agent or {}).get("name"), sampling, threshold)[:12],
            environment=environment,
            dataset_version=(exported or {}).get("dataset_version")
            or _digest(sorted(row[COLUMNS["tasks"].index("data_json")] for row in task_rows)),
            split=None,
            model=(first.response or {}).get("model") or first.params.get("model"),
            harness="nemo-gym",
            prompt_template=None,
            sampling_json=_dumps(sampling),
            repeats=repeats,
            shard_count=1,
            verifier_version=IMPORTED_VERSION,
        )
    ]
    with staged_store(out) as con:
        register_verifier_version(
            con,
            IMPORTED_VERSION,
            IMPORTED_VERSION,
            {"file": str(path), "pass_threshold": threshold},
            source=f"nemo-gym import of {path}",
        )
        insert_tool_lists(con, tool_lists)
        for table in ("runs", "tasks", "rollouts", "model_calls"):
            insert_rows(con, table, tables[table])
        # Sealed as imported: the seal says the verdicts are the file's, over its outputs.
        stored = {row[0]: judged_of(row) for row in tables["rollouts"]}
        verdicts = tables["verifications"]
        insert_verdicts(con, verdicts, [stored[row[0]] for row in verdicts])
        # sealed as they are now: which rollouts the file left without a verdict among them
        seal_tasks(con, claim(con, str(store_path(out))))
    status_at = COLUMNS["rollouts"].index("status")
    pairs = Counter(key for key, _ in numbered)
    return {
        "run_id": run_id,
        "store": str(store_path(out)),
        "tasks": len(task_rows),
        "rollouts": len(tables["rollouts"]),
        "failed": sum(row[status_at] == "failed" for row in tables["rollouts"]),
        "duplicates": sum(n - 1 for n in pairs.values()),
        "missing": len(expected - done - set(attempts)),
        "repeats": repeats,
        "environment": environment,
        "verifier_version": IMPORTED_VERSION,
        "pass_threshold": threshold,
        "sidecars": {k: str(v) for k, v in sidecars.items()},
    }


def _exported_benchmark(rows: list[NemoRow]) -> dict[str, str] | None:
    """The benchmark name, version and dataset version a gymflow export states on every line
    (`gymflow_benchmark`), when all its lines state the same; a file of other origin, or one
    mixing runs, has none."""
    stated = {json.dumps(row.fields.get("gymflow_benchmark"), sort_keys=True) for row in rows}
    if len(stated) != 1:
        return None
    benchmark = json.loads(stated.pop())
    if not isinstance(benchmark, dict):
        return None
    name, version = benchmark.get("name"), benchmark.get("version")
    dataset = benchmark.get("dataset_version")
    if not (isinstance(name, str) and isinstance(version, str) and version):
        return None
    return {"name": name, "version": version} | (
        {"dataset_version": dataset} if isinstance(dataset, str) and dataset else {}
    )


def _records(
    run_id: str,
    now: datetime,
    path: Path,
    tasks: dict[int, _Task],
    numbered: list[tuple[tuple[int, int], NemoRow]],
    attempts: dict[tuple[int, int], list[NemoRow]],
    threshold: float,
    tool_lists: ToolLists,
) -> dict[str, list[tuple]]:
    task_rows = []
    for index, task in sorted(tasks.items()):
        env_task, sample = task.env_task, task.sample
        task_rows.append(
            task_row(
                run_id=run_id,
                task_id=task.task_id,
                task_index=index,
                shard_index=0,
                prompt=_first_user_text(sample.input_items),
                reference=env_task.reference if env_task else None,
                data=env_task.data if env_task else task.data,
                tags=env_task.tags if env_task else _tags(task.data),
                difficulty=env_task.difficulty if env_task else None,
                json_of=_dumps,
            )
        )
    rollouts, calls, verifications = [], [], []
    seen: set[tuple[int, int]] = set()
    for key, row in numbered:
        task = tasks[key[0]]
        # A pair seen before is imported under its own id, so health reports the duplicate.
        identity = task.task_id if key not in seen else f"{task.task_id}@{row.line}"
        rid = rollout_id(run_id, identity, key[1])
        seen.add(key)
        result = outcome(row)
        rollouts.append(_rollout(run_id, rid, task.task_id, key[1], row, result))
        calls.append(_call(rid, 0, row, result, tool_lists))
        if result.status == "completed" and row.reward is not None:
            task_fields = task.data
            verdict = Verification(
                IMPORTED_VERSION,
                "ok",
                row.reward,
                row.reward >= threshold,
                details={
                    "source": str(path),
                    "line": row.line,
                    # what the verifier added to the row, beside the task's fields
                    "fields": {
                        k: v for k, v in row.fields.items() if task_fields.get(k, object()) != v
                    },
                },
            )
            verifications.append(verification_row(rid, verdict, now, json_of=_dumps))
    for key, tries in sorted(attempts.items()):
        task = tasks[key[0]]
        rid = rollout_id(run_id, task.task_id, key[1])
        last = tries[-1]
        rollouts.append(_rollout(run_id, rid, task.task_id, key[1], last, outcome(last)))
        graded = last.fields.get("gymflow_verification")
        if isinstance(graded, dict) and graded.get("status") is not None:
            # A failures line holds no score, whatever status it gives its grading: gymflow's
            # export writes `ok` for a reward that was no finite number, and an `ok` without a
            # reward was a scored fail.
            verdict = Verification(
                IMPORTED_VERSION,
                VERIFY_ERROR,
                None,
                None,
                _text(graded.get("failure_kind"))
                or _text(last.fields.get("gymflow_failure_kind"))
                or "verifier_error",
                {"source": str(path), "line": last.line, "status": _text(graded["status"])},
            )
            verifications.append(verification_row(rid, verdict, now, json_of=_dumps))
        calls.extend(
            _call(rid, n, row, outcome(row), tool_lists, attempt=True)
            for n, row in enumerate(tries)
        )
    return {
        "tasks": task_rows,
        "rollouts": rollouts,
        "model_calls": calls,
        "verifications": verifications,
    }


def _text(value: Any) -> str | None:
    """A file's value for a text column: text as it is, anything else as its JSON."""
    return value if value is None or isinstance(value, str) else _dumps(value)


def _rollout(
    run_id: str, rid: str, task_id: str, repeat: int, row: NemoRow, result: Outcome
) -> tuple:
    output = row.output
    usage = _usage(row.response)
    calls = row.model_calls or model_turns(output)
    return rollout_row(
        rollout_id=rid,
        run_id=run_id,
        task_id=task_id,
        repeat_index=repeat,
        seed=None,
        status=result.status,
        failure_kind=result.failure_kind,
        error=result.error,
        incomplete=result.incomplete,
        output_text=output_text(output),
        trajectory=[*row.input_items, *output],
        num_turns=calls,
        num_model_calls=calls,
        input_tokens=usage["input_tokens"],
        output_tokens=usage["output_tokens"],
        started_at=None,  # a NeMo Gym file keeps no times
        finished_at=None,
        counters={},
        json_of=_dumps,
    )


def _call(
    rid: str,
    number: int,
    row: NemoRow,
    result: Outcome,
    tool_lists: ToolLists,
    *,
    attempt: bool = False,
) -> tuple:
    """The file's evidence of a rollout's model calls: its one request and response as given
    (NeMo Gym keeps one usage per rollout, so the record carries the rollout's totals; it keeps
    no HTTP status or latency)."""
    failed = result.status == "failed"
    call = ModelCall(
        call_index=0,
        attempt=number if attempt else 0,
        status="error" if failed else "incomplete" if result.incomplete else "completed",
        failure_kind=result.failure_kind,
        http_status=None,
        latency_s=None,
        request=row.params,
        response=row.response,
        sampling={k: row.params[k] for k in SAMPLING_KEYS if k in row.params},
        error=result.error,
        **_usage(row.response),
    )
    return model_call_row(rid, call, tool_lists, json_of=_dumps)
