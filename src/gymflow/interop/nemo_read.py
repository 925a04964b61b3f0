"""Reading NeMo Gym rollout files: every line parsed and checked before anything is stored.

A NeMo Gym rollout file holds one JSON object per line and per rollout: `responses_create_params`
(the Responses API request), `response` (the Responses API object: `output`, `usage`), `reward`,
and the dataset row's own fields. Versions since 0.3 add `_ng_task_index` / `_ng_rollout_index`
and `agent_ref`, and write two files beside the rollouts: `<stem>_materialized_inputs.jsonl`
(every rollout that was asked for) and `<stem>_failures.jsonl` (rollouts whose agent failed,
one line per attempt, with `_ng_failure_class`).

Parsing is bounded and strict: NaN, ±Infinity and numbers that overflow a double are refused
(JSON has none of them), indices and repeat counts have ceilings, and every item the importer
reads (message content, output items, usage) is type-checked, so a hostile line is one problem
naming the file, line and field, never a traceback."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from gymflow.core.errors import UserError

TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
FAILURE_CLASS = "_ng_failure_class"
#: Keys of a line that are not the task's own fields.
RESERVED = (
    "responses_create_params",
    "response",
    "reward",
    TASK_INDEX,
    ROLLOUT_INDEX,
    "agent_ref",
    FAILURE_CLASS,
    "_ng_failure_terminal",
    "_ng_no_persist",
)
#: Ceilings: a repeat count past MAX_REPEATS or a task index past MAX_TASK_INDEX is a broken or
#: hostile file (a billion repeats would make every later stage enumerate a billion rows).
MAX_REPEATS = 10_000
MAX_TASK_INDEX = 100_000_000
#: A reward's magnitude above this is refused: sums over a run of them would overflow.
MAX_ABS_REWARD = 1e12
MAX_TOKENS = 2**53
#: A longer line is refused unread (NeMo Gym's largest shipped lines are under 1 MB). Parsed, a
#: line of small objects takes ~10 times its size: 256 MB would have been ~2.6 GB in memory.
MAX_LINE_BYTES = 64 * 2**20
MAX_REPORTED = 20
#: The Responses API's statuses: an unknown one would otherwise be scored as a completed answer.
STATUSES = ("completed", "incomplete", "failed", "cancelled", "queued", "in_progress")
_SURROGATE = re.compile("[\ud800-\udfff]")


class InteropError(UserError, ValueError):
    """A file that cannot be imported or exported; names the file, line and field."""


@dataclass(frozen=True, slots=True)
class NemoRow:
    """One checked line of a rollout, materialized-inputs or failures file."""

    line: int
    task_index: int | None
    rollout_index: int | None
    params: dict[str, Any]
    response: dict[str, Any] | None
    reward: float | None
    agent_ref: dict[str, Any] | None
    failure_class: str | None
    fields: dict[str, Any]  # everything not reserved: the task's fields and the verifier's

    @property
    def input_items(self) -> list[dict[str, Any]]:
        given = self.params.get("input", [])
        if isinstance(given, str):
            return [{"type": "message", "role": "user", "content": given}]
        return list(given)

    @property
    def output(self) -> list[dict[str, Any]]:
        """The items the rollout added after its input. An aviary response holds one
        conversation per model call (`contains_transitions`); the last one is the whole
        rollout."""
        response = self.response or {}
        output = response.get("output") or []
        if not (response.get("contains_transitions") is True and output):
            return output
        last, given = output[-1], self.input_items
        return last[len(given) :] if last[: len(given)] == given else last

    @property
    def model_calls(self) -> int | None:
        """Model calls the file states (one per aviary transition); None when it does not."""
        response = self.response or {}
        return len(response["output"]) if response.get("contains_transitions") is True else None

    @property
    def key(self) -> tuple[int, int] | None:
        if self.task_index is None or self.rollout_index is None:
            return None
        return (self.task_index, self.rollout_index)


class _NonFinite:
    """Stands in for a NaN, ±Infinity or overflowing number while a line is parsed, so the
    check that follows can name the field it sits in."""

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


class _Twice:
    """Stands in for a key's value when the key is given more than once in one object: parsers
    disagree on which value counts (Python's and jq keep the last, others the first), so a line
    holding `"reward": 0, ..., "reward": 1` has no one meaning to import."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                value[key] = _Twice()
            seen.add(key)
    return value


def parse_line(raw: str) -> Any:
    """JSON without NaN, ±Infinity or overflow (they come back as _NonFinite markers) and
    without a key given twice in one object (its value comes back as a _Twice marker)."""
    return json.loads(
        raw, parse_constant=_NonFinite, parse_float=_parse_float, object_pairs_hook=_object
    )


#: Deeper nesting is refused before any recursive walk (the JSON parser itself allows ~1,000
#: levels, more than the walks, the encoder and the store can follow).
MAX_DEPTH = 100


def _value_problems(row: Any) -> list[str]:
    """Non-finite numbers, text that is not UTF-8 (a lone surrogate `\\ud800` parses but cannot
    be stored) and nesting past MAX_DEPTH, each with the field it sits in. Iterative, so depth
    alone cannot exhaust the stack."""
    problems: list[str] = []
    stack: list[tuple[Any, str, int]] = [(row, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return [f"{path[:60]}...: nested deeper than {MAX_DEPTH} levels"]
        if isinstance(value, _NonFinite):
            problems.append(f"{path}: {value.text} is not a finite number")
        elif isinstance(value, _Twice):
            problems.append(f"{path}: given more than once in one object (which one counts?)")
        elif isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                problems.append(f"{path or '(key)'}: text with a lone surrogate (not UTF-8)")
        elif isinstance(value, dict):
            for k, v in value.items():
                stack.append((k, path, depth + 1))
                stack.append((v, f"{path}.{k}" if path else k, depth + 1))
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    return problems


def _shown(value: Any) -> str:
    return json.dumps(value, default=lambda v: getattr(v, "text", str(v)))[:40]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _content_problems(content: Any, path: str) -> list[str]:
    if content is None or isinstance(content, str):
        return []
    if not isinstance(content, list):
        return [f"{path}: expected text or a list of content parts, got {_shown(content)}"]
    problems = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            problems.append(f"{path}[{i}]: expected a content part object, got {_shown(part)}")
            continue
        for key in ("type", "text", "refusal"):
            if key in part and not isinstance(part[key], str | None):
                problems.append(f"{path}[{i}].{key}: expected text, got {_shown(part[key])}")
    return problems


REQUIRED_TEXT = {
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id",),
}


def item_problems(items: Any, path: str) -> list[str]:
    """Type problems of a list of Responses API items, each as 'field: what is wrong'."""
    if not isinstance(items, list):
        return [f"{path}: expected a list of items, got {_shown(items)}"]
    problems = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: expected an item object, got {_shown(item)}")
            continue
        for key in ("type", "role", "name", "call_id", "arguments"):
            if key in item and not isinstance(item[key], str | None):
                problems.append(f"{where}.{key}: expected text, got {_shown(item[key])}")
        # what the Responses API requires of a tool call and its result: without a call_id the
        # two pair on null, and training data gets `"tool_call_id": null`
        for key in REQUIRED_TEXT.get(item.get("type"), ()):
            if not isinstance(item.get(key), str):
                problems.append(f"{where}.{key}: missing (a {item['type']} item needs it)")
        if "content" in item:
            problems.extend(_content_problems(item["content"], f"{where}.content"))
        if "output" in item and not isinstance(item["output"], str | list | None):
            problems.append(f"{where}.output: expected text, got {_shown(item['output'])}")
    return problems


#: The usage details the importer reads its cached and reasoning token counts from.
DETAILS = (
    "input_tokens_details",
    "output_tokens_details",
    "prompt_tokens_details",
    "completion_tokens_details",
)


def _usage_problems(usage: Any) -> list[str]:
    """Responses usage (input/output_tokens), chat usage (prompt/completion_tokens), or none."""
    if usage is None:
        return []
    if not isinstance(usage, dict):
        return [f"response.usage: expected an object, got {_shown(usage)}"]
    problems = []
    for key in ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if value is not None and not (_is_int(value) and 0 <= value < MAX_TOKENS):
            problems.append(f"response.usage.{key}: expected a token count, got {_shown(value)}")
    for details in DETAILS:
        given = usage.get(details)
        if given is None:
            continue
        if not isinstance(given, dict):
            problems.append(f"response.usage.{details}: expected an object")
            continue
        for key in ("cached_tokens", "reasoning_tokens"):
            value = given.get(key)
            if value is not None and not (_is_int(value) and 0 <= value < MAX_TOKENS):
                problems.append(
                    f"response.usage.{details}.{key}: expected a token count, got {_shown(value)}"
                )
    return problems


def _index_problems(row: dict[str, Any]) -> list[str]:
    problems = []
    for key, ceiling in ((TASK_INDEX, MAX_TASK_INDEX), (ROLLOUT_INDEX, MAX_REPEATS - 1)):
        if key not in row:
            continue
        value = row[key]
        if not _is_int(value) or value < 0:
            problems.append(f"{key}: expected a non-negative integer, got {_shown(value)}")
        elif value > ceiling:
            problems.append(f"{key}: {value} is past the limit of {ceiling}")
    if (TASK_INDEX in row) != (ROLLOUT_INDEX in row):
        problems.append(f"{ROLLOUT_INDEX}: {TASK_INDEX} and {ROLLOUT_INDEX} come together")
    return problems


def row_problems(row: Any, *, needs_result: bool, needs_index: bool = False) -> list[str]:
    """Every problem of one parsed line, as 'field: what is wrong'.

    `needs_result`: a rollout line must carry `response` and `reward`; a materialized-inputs line
    carries neither, and a failures line a response but no score."""
    if not isinstance(row, dict):
        return [f"(line): expected a JSON object, got {_shown(row)}"]
    problems = _value_problems(row)
    if problems:
        return problems
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        problems.append("responses_create_params: missing or not an object")
    else:
        given = params.get("input")
        if isinstance(given, str):
            pass
        elif given is None:
            problems.append("responses_create_params.input: missing")
        else:
            problems.extend(item_problems(given, "responses_create_params.input"))
        for key in ("temperature", "top_p"):
            value = params.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                problems.append(f"responses_create_params.{key}: expected a number")
        tokens = params.get("max_output_tokens")
        if tokens is not None and not _is_int(tokens):
            problems.append("responses_create_params.max_output_tokens: expected an integer")
    problems.extend(_index_problems(row))
    if needs_index and TASK_INDEX not in row:
        problems.append(f"{TASK_INDEX}: missing (NeMo Gym writes it on every sidecar line)")
    if needs_index and needs_result and row.get(FAILURE_CLASS) is None:
        # a failures line without its class would be scored as a completed rollout
        problems.append(f"{FAILURE_CLASS}: missing (every failures line names its class)")
    if not needs_result:
        return problems
    response = row.get("response")
    if not isinstance(response, dict):
        problems.append("response: missing or not an object")
    else:
        output = response.get("output")
        if response.get("contains_transitions") is True and isinstance(output, list):
            # aviary environments: one item list (the conversation so far) per model call
            for i, step in enumerate(output):
                problems.extend(item_problems(step, f"response.output[{i}]"))
        else:
            problems.extend(item_problems(output, "response.output"))
        problems.extend(_usage_problems(response.get("usage")))
        for key in ("status", "model"):
            if response.get(key) is not None and not isinstance(response[key], str):
                problems.append(f"response.{key}: expected text, got {_shown(response[key])}")
        if isinstance(response.get("status"), str) and response["status"] not in STATUSES:
            problems.append(
                f"response.status: {_shown(response['status'])} is not a Responses status"
            )
    scored = FAILURE_CLASS not in row  # a failure's reward (NeMo Gym writes 0.0) is not a score
    if scored and row.get("reward") is None:
        problems.append("reward: missing" if "reward" not in row else "reward: expected a number")
    elif row.get("reward") is not None:
        reward = row["reward"]
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            problems.append(f"reward: expected a number, got {_shown(reward)}")
        elif abs(reward) > MAX_ABS_REWARD:
            problems.append(f"reward: {reward!r} is past the limit of ±{MAX_ABS_REWARD:g}")
    return problems


def _row(number: int, row: dict[str, Any]) -> NemoRow:
    reward = row.get("reward")
    agent_ref = row.get("agent_ref")
    return NemoRow(
        line=number,
        task_index=row.get(TASK_INDEX),
        rollout_index=row.get(ROLLOUT_INDEX),
        params=row["responses_create_params"],
        response=row.get("response"),
        reward=float(reward) if reward is not None else None,
        agent_ref=agent_ref if isinstance(agent_ref, dict) else None,
        failure_class=str(row[FAILURE_CLASS]) if row.get(FAILURE_CLASS) is not None else None,
        fields={k: v for k, v in row.items() if k not in RESERVED},
    )


def raise_problems(path: Path, problems: list[str]) -> None:
    if not problems:
        return
    shown = problems[:MAX_REPORTED]
    more = len(problems) - len(shown)
    raise InteropError(
        f"{path}: {len(problems)} problem(s), nothing imported:\n  "
        + "\n  ".join(shown)
        + (f"\n  ... and {more} more" if more else "")
    )


def _bounded_lines(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) per line; None for a line past MAX_LINE_BYTES, whose rest is
    skipped without being held, so one endless line cannot exhaust memory."""
    number = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := handle.readline(2**20)) and not rest.endswith(b"\n"):
                pass
            yield number, None
            continue
        yield number, raw


def read_lines(path: Path, *, needs_result: bool = True, sidecar: bool = False) -> list[NemoRow]:
    """Parse and check every line of one file; raise InteropError listing the problems.
    A sidecar (materialized inputs, failures) may be empty, and its lines carry their indices."""
    rows: list[NemoRow] = []
    problems: list[str] = []
    try:
        if not path.is_dir() and path.exists() and not path.is_file():
            # a FIFO waits forever for a writer, /dev/zero is one endless line
            raise InteropError(f"{path}: not a regular file")
        with path.open("rb") as handle:
            for number, raw in _bounded_lines(handle):
                if raw is None:
                    limit = MAX_LINE_BYTES // 2**20
                    problems.append(f"{path}:{number}: (line): longer than {limit} MB")
                    continue
                if not raw.strip():
                    continue
                try:
                    # a byte order mark (what Windows tools write first) is no part of the JSON
                    text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                    row = parse_line(text)
                except UnicodeDecodeError as exc:
                    problems.append(f"{path}:{number}: not UTF-8 text at byte {exc.start}")
                    continue
                except (json.JSONDecodeError, RecursionError) as exc:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
                    problems.append(f"{path}:{number}: not JSON: {reason}")
                    continue
                except ValueError:  # Python refuses integers past 4,300 digits
                    problems.append(f"{path}:{number}: not JSON: an integer too long to read")
                    continue
                found = row_problems(row, needs_result=needs_result, needs_index=sidecar)
                if found:
                    problems.extend(f"{path}:{number}: {problem}" for problem in found)
                else:
                    rows.append(_row(number, row))
    except OSError as exc:
        raise InteropError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not rows and not problems and not sidecar:
        problems.append(f"{path}: no rollouts (empty file)")
    raise_problems(path, problems)
    return rows


def sidecar_path(path: Path, suffix: str) -> Path:
    """NeMo Gym's names for the files beside `rollouts.jsonl`: `rollouts<suffix>.jsonl`."""
    return path.with_name(path.stem + suffix + ".jsonl")
