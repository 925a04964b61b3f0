"""Dataset rows to Tasks through the field mapping, checking every mapped field of every row.

Each problem names the file, the rows and the field; rows failing the same way are one problem
(the first few rows and how many more), so a file missing a column gives one line, not 100,000."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gymflow.core.errors import UserError
from gymflow.core.tasks import Task
from gymflow.environments.dataset.readers import RawRow
from gymflow.environments.dataset.simulate import simulate
from gymflow.environments.dataset.spec import FieldMap
from gymflow.verifiers.base import DataField

#: Rows named in one problem before "and N more rows".
ROWS_SHOWN = 5
_MISSING = object()
_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


class FieldProblem(UserError):
    pass


@dataclass(frozen=True, slots=True)
class RowRules:
    """Everything a row is checked and mapped against."""

    fields: FieldMap
    nemo_gym: bool
    id_prefix: str
    verifier: str
    verifier_params: dict[str, Any]
    verifier_fields: dict[str, DataField]  # what the verifier declares it reads
    #: The whole row is the task's data (a NeMo Gym server's /verify reads the row itself).
    carry_row: bool = False

    @property
    def verifier_map(self) -> dict[str, str]:
        """Mapped names, or by default each field the verifier reads from the same-named column."""
        return self.fields.verifier or {name: name for name in self.verifier_fields}


@dataclass
class Mapped:
    tasks: list[Task] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)  # per task: its row's content hash
    wheres: list[str] = field(default_factory=list)  # per task: "line 12"
    _failing: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)

    def fail(self, where: str, subject: str, kind: str, detail: str) -> None:
        self._failing.setdefault((subject, kind), []).append((where, detail))

    def problems(self, source: str) -> list[str]:
        out = []
        for (subject, _), rows in self._failing.items():
            shown = ", ".join(where for where, _ in rows[:ROWS_SHOWN])
            more = f" and {len(rows) - ROWS_SHOWN} more rows" if len(rows) > ROWS_SHOWN else ""
            label = f"{subject}: " if subject else ""
            out.append(f"{source}: {shown}{more}: {label}{rows[0][1]}")
        return out


def get_path(row: dict[str, Any], path: str) -> Any:
    """`a.b.0.c`: keys of objects and indices of lists; _MISSING when any step is absent."""
    if "." not in path:  # the usual case, and the hot one at 100,000 rows
        return row.get(path, _MISSING)
    value: Any = row
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part, _MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def coerce(value: Any, kind: str) -> Any:
    """The value as the verifier needs it; CSV gives text, so numbers and JSON are parsed."""
    if kind == "number":
        if isinstance(value, str):
            value = _number_text(value)
            if isinstance(value, str):
                raise FieldProblem("expected a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FieldProblem(f"expected a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise FieldProblem(f"non-finite number {value}")
        return value
    if kind == "text":
        if not isinstance(value, str):
            raise FieldProblem(f"expected text, got {type(value).__name__}")
        return value
    if kind == "scalar":
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise FieldProblem(f"expected text or a number, got {type(value).__name__}")
        return value
    want = list if kind == "list" else dict
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise FieldProblem(f"expected a {kind} (or its JSON text)") from None
    if not isinstance(value, want):
        raise FieldProblem(f"expected a {kind}, got {type(value).__name__}")
    return value


def _number_text(value: str) -> Any:
    """A number written as text (`42`, `-3.5`, `1,234`), or the text itself."""
    cleaned = value.replace(",", "").strip()
    for parse in (int, float):
        try:
            return parse(cleaned)
        except ValueError:
            continue
    return value


def _verifier_data(row: dict[str, Any], where: str, rules: RowRules, out: Mapped) -> dict | None:
    data, ok = {}, True
    for name, path in rules.verifier_map.items():
        declared = rules.verifier_fields.get(name)
        value = get_path(row, path)
        if value is _MISSING or value is None:  # a table's null is a value left out
            if declared is None or declared.required:
                detail = "missing" if value is _MISSING else "null"
                out.fail(where, _subject(rules, name, path), detail, detail)
                ok = False
            continue
        if declared is not None:
            try:
                value = coerce(value, declared.kind)
            except FieldProblem as exc:
                problem = f"{exc}: {_describe(value)}"
                out.fail(where, _subject(rules, name, path), str(exc), problem)
                ok = False
                continue
        data[name] = value
    return data if ok else None


def _subject(rules: RowRules, name: str, path: str) -> str:
    declared = rules.verifier_fields.get(name)
    kind = f" as {declared.kind}" if declared else ""
    return f"field {path!r} (verifier {rules.verifier} reads {name!r}{kind})"


def _text_or_none(row: dict[str, Any], path: str | None, where: str, role: str, out: Mapped):
    if path is None:
        return None, True
    value = get_path(row, path)
    if value is _MISSING or value is None:
        return None, True
    if role == "difficulty" and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value), True
    if not isinstance(value, str):
        out.fail(where, f"field {path!r} ({role})", "type", f"expected text: {_describe(value)}")
        return None, False
    return value, True


def _tags(row: dict[str, Any], path: str | None, where: str, out: Mapped):
    if path is None:
        return (), True
    value = get_path(row, path)
    if value is _MISSING or value is None:
        return (), True
    if isinstance(value, str):
        return (value,), True
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value), True
    out.fail(where, f"field {path!r} (tags)", "type", f"expected text or texts: {_describe(value)}")
    return (), False


def _content_ok(content: Any) -> bool:
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("text", ""), str) for part in content
    )


def _request(row: dict[str, Any], where: str, out: Mapped):
    """A NeMo Gym row's `responses_create_params`: its input items and tools."""
    subject = "field 'responses_create_params'"
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        out.fail(where, subject, "missing", "missing or not an object")
        return None
    items = params.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        out.fail(where, f"{subject[:-1]}.input'", "type", "expected a list of input items")
        return None
    for index, item in enumerate(items):
        if not _content_ok(item.get("content")) or not isinstance(item.get("role"), str | None):
            # `content: 5` was a TypeError; a list of numbers would reach the model server
            detail = "expected a role as text and content as text or a list of text parts"
            out.fail(where, f"{subject[:-1]}.input.{index}'", "type", detail)
            return None
    if not isinstance(params.get("instructions"), str | None):
        out.fail(where, f"{subject[:-1]}.instructions'", "type", "expected text")
        return None
    tools = params.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        out.fail(where, f"{subject[:-1]}.tools'", "type", "expected a list of tools")
        return None
    if params.get("instructions"):
        items = [{"type": "message", "role": "system", "content": params["instructions"]}, *items]
    return tuple(items), tuple(tools)


def row_input_items(row: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The input items a NeMo Gym row's request opens a rollout with (as its task's
    `input_items`); empty when the row has none it could use."""
    request = _request(row, "", Mapped())
    return request[0] if request else ()


def _id_text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def first_user_text(items: Iterable[dict[str, Any]]) -> str:
    """What the local policy keys a request on, and what the store keeps as the prompt."""
    for item in items:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(p.get("text") or "" for p in content or () if isinstance(p, dict))
    return ""


def map_row(raw: RawRow, rules: RowRules, out: Mapped) -> None:
    """Append the row's task to `out`, or record why it has none."""
    if raw.fields is None:
        out.fail(raw.where, "", raw.problem or "unreadable", raw.problem or "unreadable")
        return
    row, where, f = raw.fields, raw.where, rules.fields
    try:
        blob = orjson.dumps(row, option=_CANONICAL, default=str)
    except orjson.JSONEncodeError as exc:  # orjson reads 1,024 levels but writes only 254
        out.fail(where, "", "unhashable", f"cannot be hashed: {exc}")
        return
    digest = hashlib.blake2b(blob, digest_size=16).digest()
    ok = True
    if f.id is not None:
        value = get_path(row, f.id)
        task_id = _id_text(value)
        if task_id is None:
            shown = _describe(None if value is _MISSING else value)
            out.fail(where, f"field {f.id!r} (id)", "id", f"expected a text or integer id: {shown}")
            ok = False
    else:
        task_id = f"{rules.id_prefix}-{digest.hex()[:12]}"
    items: tuple = ()
    tools: tuple = ()
    inputs: dict[str, Any]
    if rules.nemo_gym:
        request = _request(row, where, out)
        if request is None:
            ok = False
            inputs = {}
        else:
            items, tools = request
            inputs = {"prompt": first_user_text(items)}
    else:
        inputs = {} if f.prompt else row
    for name, path in f.prompt.items():
        value = get_path(row, path)
        if value is _MISSING:
            out.fail(where, f"field {path!r} (prompt reads {name!r})", "missing", "missing")
            ok = False
        else:
            inputs[name] = value
    if f.tools is not None:
        value = get_path(row, f.tools)
        try:
            tools = tuple(coerce([] if value is _MISSING else value, "list"))
        except FieldProblem as exc:
            out.fail(where, f"field {f.tools!r} (tools)", "type", str(exc))
            ok = False
    data = dict(row) if rules.carry_row else _verifier_data(row, where, rules, out)
    tags, tags_ok = _tags(row, f.tags, where, out)
    difficulty, difficulty_ok = _text_or_none(row, f.difficulty, where, "difficulty", out)
    reference, reference_ok = _text_or_none(row, f.reference, where, "reference", out)
    if data is None or not (ok and tags_ok and difficulty_ok and reference_ok):
        return
    simulated = simulate(rules.verifier, rules.verifier_params, data)
    out.tasks.append(
        Task(
            task_id=task_id,
            inputs=inputs,
            data=data,
            reference=reference if reference is not None else simulated.reference,
            distractor=simulated.distractor,
            reference_actions=() if reference is not None else simulated.reference_actions,
            tags=tags,
            difficulty=difficulty,
            input_items=items,
            tools=tools,
        )
    )
    out.digests.append(digest)
    out.wheres.append(where)


def map_rows(rows: Iterable[RawRow], rules: RowRules) -> Mapped:
    out = Mapped()
    for raw in rows:
        map_row(raw, rules, out)
    return out
