"""BFCL single-turn function calling, read from the JSON data the installed `bfcl-eval` package
ships (through importlib.resources; none of its Python modules is imported).

Each task offers its own functions as Responses API function tools: BFCL's types become JSON
Schema (`dict` -> `object`, `float` -> `number`, `tuple` -> `array`, `any` -> unconstrained) and
names that the API does not allow (`math.factorial`) are rewritten (`math_factorial`) and mapped
back for verification."""

from __future__ import annotations

import importlib.resources
import json
import re
from functools import cache
from typing import Any

from gymflow.core.tasks import Task, ToolCall
from gymflow.environments.base import Environment
from gymflow.environments.resources import ResourcesServer
from gymflow.models.responses import function_tool

#: Split name -> BFCL data file stem (python categories only).
CATEGORIES = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
}
_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
# BFCL keys with no JSON Schema meaning; "optional" is expressed by `required` already.
_DROP = {"optional"}
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_REFUSAL = (
    "None of the available functions can answer this request, so I will not call any of them."
)


def _read_lines(*parts: str) -> list[dict[str, Any]]:
    path = importlib.resources.files("bfcl_eval").joinpath("data", *parts)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@cache
def load_category(category: str) -> tuple[dict[str, Any], ...]:
    """BFCL rows of a category, each with its `ground_truth` joined on `id` (none for
    irrelevance)."""
    stem = f"BFCL_v4_{CATEGORIES[category]}.json"
    rows = _read_lines(stem)
    if category == "irrelevance":
        return tuple({**row, "ground_truth": []} for row in rows)
    answers = {row["id"]: row["ground_truth"] for row in _read_lines("possible_answer", stem)}
    return tuple({**row, "ground_truth": answers[row["id"]]} for row in rows)


def tool_name(name: str) -> str:
    """A name the Responses API accepts (`^[a-zA-Z0-9_-]{1,64}$`)."""
    return _INVALID_NAME_CHARS.sub("_", name)[:64]


def json_schema(schema: Any) -> Any:
    """A BFCL parameter schema as JSON Schema."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key == "type":
            if value == "any":
                continue
            out["type"] = _TYPES.get(value, value)
        elif key == "properties":
            out["properties"] = {name: json_schema(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = json_schema(value)
        else:
            out[key] = value
    return out


def _chosen(option: Any) -> Any:
    """A concrete value from one allowed option: dict options hold allowed lists per key."""
    if isinstance(option, dict):
        return {k: _chosen(v[0]) for k, v in option.items() if v and v[0] != ""}
    if isinstance(option, list) and option and all(isinstance(o, dict) for o in option):
        return [_chosen(o) for o in option]
    return option


def _reference_calls(row: dict[str, Any], names: dict[str, str]) -> tuple[ToolCall, ...]:
    """The first allowed value of each parameter; a leading `""` leaves an optional parameter
    out (a required one takes its first real value)."""
    docs = {doc["name"]: doc for doc in row["function"]}
    calls = []
    for expected in row["ground_truth"]:
        (name, allowed), *_ = expected.items()
        required = docs[name]["parameters"].get("required", [])
        documented = docs[name]["parameters"].get("properties", {})
        arguments = {}
        for param, options in allowed.items():
            values = [o for o in options if o != ""]
            # A few BFCL answers allow a parameter the function does not document; BFCL's own
            # checker rejects it, so the reference leaves it out.
            if param not in documented:
                continue
            if values and (options[0] != "" or param in required):
                arguments[param] = _chosen(values[0])
        calls.append(ToolCall(names[name], arguments))
    return tuple(calls)


def _wrong_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + max(1, abs(value))
    if isinstance(value, str):
        return f"not {value}" if value else "unknown"
    if isinstance(value, list):
        return [*value, value[-1]] if value else ["unknown"]
    return "unknown"


def _distractor_calls(
    row: dict[str, Any], reference: tuple[ToolCall, ...], names: dict[str, str], index: int
) -> tuple[ToolCall, ...]:
    """Wrong but plausible: a wrong argument value, or (every other task with a choice of
    functions) a call to the wrong function; for parallel tasks sometimes one call too few."""
    if row["ground_truth"] and len(reference) > 1 and index % 3 == 2:
        return reference[:-1]
    first = reference[0]
    others = [tool for original, tool in names.items() if tool != first.name]
    if others and index % 2 == 1:
        return (ToolCall(others[0], first.arguments), *reference[1:])
    for param, value in first.arguments.items():
        wrong = {**first.arguments, param: _wrong_value(value)}
        return (ToolCall(first.name, wrong), *reference[1:])
    # No argument to get wrong: supply one the function does not take.
    return (ToolCall(first.name, {"unexpected_argument": 1}), *reference[1:])


def _irrelevant_call(row: dict[str, Any], names: dict[str, str]) -> tuple[ToolCall, ...]:
    doc = row["function"][0]
    required = doc["parameters"].get("required", [])
    properties = doc["parameters"].get("properties", {})
    sample = {"integer": 1, "float": 1.0, "boolean": True, "array": [], "dict": {}}
    arguments = {p: sample.get(properties.get(p, {}).get("type"), "example") for p in required}
    return (ToolCall(names[doc["name"]], arguments),)


def question_text(row: dict[str, Any]) -> str:
    turn = row["question"][0]
    return "\n\n".join(m["content"] for m in turn if m.get("role") == "user")


def make_task(row: dict[str, Any], category: str, index: int) -> Task:
    names = {doc["name"]: tool_name(doc["name"]) for doc in row["function"]}
    if len(set(names.values())) != len(names):
        raise ValueError(f"BFCL {row['id']}: two function names map to one tool name {names}")
    data = {
        "category": category,
        "functions": row["function"],
        "ground_truth": row["ground_truth"],
        "name_map": {tool: original for original, tool in names.items()},
    }
    if category == "irrelevance":
        reference, reference_actions = _REFUSAL, ()
        distractor_actions = (_irrelevant_call(row, names),)
    else:
        reference, calls = "", _reference_calls(row, names)
        reference_actions = (calls,)
        distractor_actions = (_distractor_calls(row, calls, names, index),)
    return Task(
        task_id=row["id"],
        inputs={"question": question_text(row)},
        data=data,
        reference=reference,
        distractor="",
        reference_actions=reference_actions,
        distractor_actions=distractor_actions,
        tags=(category,),
    )


def tools_of(task: Task) -> list[dict[str, Any]]:
    by_name = {original: tool for tool, original in task.data["name_map"].items()}
    return [
        function_tool(
            by_name[doc["name"]], doc.get("description", ""), json_schema(doc["parameters"])
        )
        for doc in task.data["functions"]
    ]


class BfclResources(ResourcesServer):
    """Offers each task's own functions; the model's calls are verified, never executed."""

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        return tools_of(task)


class BfclEnvironment(Environment):
    def generate(self, split: str) -> list[Task]:
        if split in CATEGORIES:
            return self._category(split)
        if split == "all":
            return [task for category in CATEGORIES for task in self._category(category)]
        # smoke: an equal share of the split's size from each category, interleaved so that any
        # prefix (--limit N) still covers every category
        per_category = (self.manifest.splits[split].size or 0) // len(CATEGORIES)
        shares = [self._category(category)[:per_category] for category in CATEGORIES]
        return [task for group in zip(*shares, strict=True) for task in group]

    @staticmethod
    def _category(category: str) -> list[Task]:
        return [make_task(row, category, i) for i, row in enumerate(load_category(category))]

    def resources_server(self, verifier_params: dict[str, Any] | None = None) -> ResourcesServer:
        return BfclResources(self, verifier_params)
