"""Function-call correctness with the Berkeley Function Calling Leaderboard's possible-answer
semantics (its AST checker for Python, re-implemented; bfcl-eval's modules are never imported).

A task's `data` holds the BFCL function documents (`functions`), the possible answers
(`ground_truth`: a list of `{function_name: {param: [allowed values]}}`), its `category`, and
`name_map` from the tool names the model saw back to BFCL's names. The rules:

- each parameter's value must be one of its allowed values; `""` among them means the parameter
  may be left out; strings compare after BFCL's standardisation (case, spaces and `,./-_*^`
  ignored), an integer is accepted where a float is expected;
- the model makes exactly as many calls as the answer has, and parallel calls match in any order;
- an irrelevance task passes only when no function is called.

Details name the first mismatch; the reason says how the calls went wrong: `no_call` (text only:
no answer in the form read), `wrong_call_count`, `wrong_function`, `wrong_arguments`,
`called_irrelevant`, `malformed_call` (arguments that are no JSON object)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from gymflow.verifiers.base import DataField, Verdict, VerifyInput, verifier

_STANDARDIZE = re.compile(r"[ ,./\-_*^]")
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "float": (float, int),
    "number": (float, int),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
    "object": (dict,),
}


class BfclParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    arguments: dict[str, Any]


class Malformed(ValueError):
    """A function call whose arguments are not a JSON object."""


def standardize(text: str) -> str:
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def model_calls(trajectory: list[dict[str, Any]], name_map: dict[str, str]) -> list[Call]:
    """The function calls the model made, with tool names mapped back to BFCL's names."""
    calls = []
    for item in trajectory:
        if item.get("type") != "function_call":
            continue
        raw = item.get("arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except (json.JSONDecodeError, RecursionError) as exc:
            # RecursionError: arguments nested thousands deep; as a verifier error the call was
            # a failure left out of the scores, not the wrong call it is
            raise Malformed(
                f"call to {item.get('name')!r}: arguments are not JSON ({exc})"
            ) from None
        if not isinstance(arguments, dict):
            raise Malformed(f"call to {item.get('name')!r}: arguments are not a JSON object")
        name = item.get("name", "")
        calls.append(Call(name_map.get(name, name), arguments))
    return calls


def _type_ok(value: Any, kind: str | None) -> bool:
    if kind is None or kind == "any" or kind not in _PYTHON_TYPES:
        return True
    if isinstance(value, bool) and kind != "boolean":
        return False  # JSON true is not the integer 1
    return isinstance(value, _PYTHON_TYPES[kind])


def _is_variable(value: Any, allowed: list[Any]) -> bool:
    """BFCL accepts a value of the possible answer's own type where that differs from the
    documented type: the answer names a variable (e.g. a string where an integer is documented)."""
    option = next((a for a in allowed if a != ""), None)
    return option is not None and type(value) is type(option)


def _normal(value: Any) -> Any:
    """A value in comparable form: strings standardised, recursively."""
    if isinstance(value, str):
        return standardize(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _dict_matches(value: dict[str, Any], allowed: dict[str, list[Any]]) -> bool:
    """A dict parameter: every key allowed and matching, every non-optional key present."""
    for key, item in value.items():
        if key not in allowed or _normal(item) not in [_normal(a) for a in allowed[key]]:
            return False
    return all(key in value or "" in options for key, options in allowed.items())


def _value_matches(value: Any, allowed: list[Any]) -> bool:
    for option in allowed:
        if option == "":
            continue
        if isinstance(value, dict) and isinstance(option, dict):
            if _dict_matches(value, option):
                return True
        elif (
            isinstance(value, list)
            and isinstance(option, list)
            and value
            and all(isinstance(v, dict) for v in value)
        ):
            if len(value) == len(option) and all(
                isinstance(o, dict) and _dict_matches(v, o)
                for v, o in zip(value, option, strict=True)
            ):
                return True
        elif _normal(value) == _normal(option):
            return True
    return False


def check_call(
    call: Call, expected: dict[str, dict[str, list[Any]]], doc: dict | None
) -> str | None:
    """None when `call` matches the possible answer `expected`, else the first mismatch."""
    (name, allowed), *_ = expected.items()
    if call.name != name:
        return f"called {call.name!r}, expected {name!r}"
    properties = (doc or {}).get("parameters", {}).get("properties", {})
    for param in (doc or {}).get("parameters", {}).get("required", []):
        if param not in call.arguments:
            return f"{name}: missing required parameter {param!r}"
    for param, value in call.arguments.items():
        if param not in allowed or (properties and param not in properties):
            return f"{name}: unexpected parameter {param!r}"
        kind = properties.get(param, {}).get("type")
        if not _type_ok(value, kind) and not _is_variable(value, allowed[param]):
            return f"{name}: parameter {param!r} should be {kind}, got {type(value).__name__}"
        if not _value_matches(value, allowed[param]):
            options = [a for a in allowed[param] if a != ""]
            return f"{name}: parameter {param!r} = {value!r}, expected one of {options!r}"
    for param, options in allowed.items():
        if param not in call.arguments and "" not in options:
            return f"{name}: parameter {param!r} is missing and not optional"
    return None


def match_calls(
    calls: list[Call], ground_truth: list[dict[str, Any]], docs: dict[str, dict]
) -> str | None:
    """None when the calls match the possible answers one to one (in any order)."""
    if len(calls) != len(ground_truth):
        return f"made {len(calls)} function call(s), expected {len(ground_truth)}"
    problems: list[list[str | None]] = [
        [check_call(call, expected, docs.get(next(iter(expected)))) for call in calls]
        for expected in ground_truth
    ]
    if _assign(problems, 0, set()):
        return None
    for index, row in enumerate(problems):
        if all(problem is not None for problem in row):
            expected = next(iter(ground_truth[index]))
            same_name = [p for c, p in zip(calls, row, strict=True) if c.name == expected]
            why = (same_name or row)[0]
            return f"expected call {index + 1} ({expected}) has no match: {why}"
    return "the calls match the expected ones only in overlapping ways (no one-to-one pairing)"


def _assign(problems: list[list[str | None]], row: int, used: set[int]) -> bool:
    """Backtracking bipartite matching; call counts are small (a handful per task)."""
    if row == len(problems):
        return True
    for col, problem in enumerate(problems[row]):
        if problem is None and col not in used and _assign(problems, row + 1, used | {col}):
            return True
    return False


@verifier(
    "bfcl",
    for_data=True,
    params=BfclParams,
    fields={
        "category": DataField("text"),
        "functions": DataField("list"),
        "ground_truth": DataField("list"),
        "name_map": DataField("mapping", required=False),
    },
    # the answer is a function call: text alone is no answer in that form
    no_answer_reasons=("no_call",),
)
def bfcl(inp: VerifyInput, params: BfclParams) -> Verdict:
    """Reward 1 when the function calls match BFCL's possible answers."""
    data = inp.task.data
    try:
        calls = model_calls(inp.trajectory, data.get("name_map", {}))
    except Malformed as exc:
        return Verdict(0.0, {"reason": "malformed_call", "mismatch": str(exc)})
    made = [{"name": c.name, "arguments": c.arguments} for c in calls]
    if data["category"] == "irrelevance":
        if calls:
            mismatch = f"called {calls[0].name!r} but no function is relevant"
            return Verdict(
                0.0, {"reason": "called_irrelevant", "mismatch": mismatch, "calls": made}
            )
        return Verdict(1.0, {"reason": "match", "calls": made})
    docs = {doc["name"]: doc for doc in data["functions"]}
    expected = [next(iter(answer)) for answer in data["ground_truth"]]
    if not calls:
        # the first expected function's name, for a reader looking for it written in the text
        details = {"reason": "no_call", "mismatch": "no function was called"}
        return Verdict(0.0, {**details, "expected": expected[0]} if expected else details)
    mismatch = match_calls(calls, data["ground_truth"], docs)
    if mismatch is not None:
        return Verdict(
            0.0, {"reason": _wrong(calls, expected), "mismatch": mismatch, "calls": made}
        )
    return Verdict(1.0, {"reason": "match", "calls": made})


def _wrong(calls: list[Call], expected: list[str]) -> str:
    """How calls that do not match went wrong: how many, which functions, or their arguments."""
    if len(calls) != len(expected):
        return "wrong_call_count"
    if sorted(call.name for call in calls) != sorted(expected):
        return "wrong_function"
    return "wrong_arguments"
