"""State match: the session's final state against the task's expected state.

For stateful tool environments the answer is not the text but what the tools did. The verifier
walks both states and names every difference by its path (`orders.O-1007.status: expected
'shipped', got 'pending'`); the first one is the headline. Free text the model writes (an email
body) can be left out with `ignore`, and lists whose order is not part of the goal (emails sent by
parallel calls) compared as multisets with `unordered`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import DataField, Verdict, VerifierError, VerifyInput, verifier

MAX_LISTED = 10


class StateMatchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ignore: list[str] = Field(
        default_factory=list,
        description="Dotted paths left out of the comparison; '*' matches any one key or index.",
    )
    unordered: list[str] = Field(
        default_factory=list, description="Dotted paths of lists compared in any order."
    )


def _hit(pattern_part: str, key: object) -> bool:
    return pattern_part in ("*", str(key))


def _without(value: Any, parts: list[str]) -> Any:
    """`value` with the paths matching `parts` left out; only the containers on the way are
    copied, so the cost follows the pattern, not the size of the state."""
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        if not rest:
            return {k: v for k, v in value.items() if not _hit(head, k)}
        return {k: _without(v, rest) if _hit(head, k) else v for k, v in value.items()}
    if isinstance(value, list):
        if not rest:
            return [v for i, v in enumerate(value) if not _hit(head, i)]
        return [_without(v, rest) if _hit(head, i) else v for i, v in enumerate(value)]
    return value


def _canonical_order(value: Any, parts: list[str]) -> Any:
    """`value` with the lists at the paths matching `parts` sorted into a canonical order."""
    if not parts:
        if not isinstance(value, list):
            return value
        return sorted(value, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        return {k: _canonical_order(v, rest) if _hit(head, k) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical_order(v, rest) if _hit(head, i) else v for i, v in enumerate(value)]
    return value


def comparable(state: Any, params: StateMatchParams) -> Any:
    for pattern in params.ignore:
        state = _without(state, pattern.split("."))
    for pattern in params.unordered:
        state = _canonical_order(state, pattern.split("."))
    return state


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


#: Leaf types whose equal values of one type are always the same leaf (`_same_leaf`).
_PLAIN_LEAVES = frozenset({str, int, float, bool, type(None)})


def _identical(expected: Any, actual: Any) -> bool:
    """True only where `differences` finds nothing: same types all the way down, equal leaves.
    Anything else (3 against 3.0, a dict subclass, NaN) answers False and is left to the walk, so
    this check only prunes; the walk, with its sorting and paths, runs where something differs."""
    kind = type(expected)
    if kind is not type(actual):
        return False
    if kind is dict:
        return len(expected) == len(actual) and all(
            key in actual and _identical(value, actual[key]) for key, value in expected.items()
        )
    if kind is list:
        return len(expected) == len(actual) and all(map(_identical, expected, actual))
    return kind in _PLAIN_LEAVES and expected == actual


def differences(expected: Any, actual: Any, path: str = "") -> Iterator[str]:
    where = path or "(state)"
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(expected.keys() | actual.keys(), key=str):
            if key not in actual:
                yield f"{_join(path, key)}: missing (expected {_show(expected[key])})"
            elif key not in expected:
                yield f"{_join(path, key)}: unexpected {_show(actual[key])}"
            elif not _identical(expected[key], actual[key]):
                yield from differences(expected[key], actual[key], _join(path, key))
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            yield f"{where}: expected {len(expected)} item(s), got {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            if not _identical(e, a):
                yield from differences(e, a, _join(path, i))
    elif not _same_leaf(expected, actual):
        yield f"{where}: expected {_show(expected)}, got {_show(actual)}"


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _same_leaf(expected: Any, actual: Any) -> bool:
    """Equal values; 3 and 3.0 are the same number, but True is not 1."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    return expected == actual


@verifier(
    "state_match",
    for_data=True,
    params=StateMatchParams,
    fields={"expected_state": DataField("mapping")},
)
def state_match(inp: VerifyInput, params: StateMatchParams) -> Verdict:
    """1 when the session's final state equals the expected state, else 0 with the differences."""
    expected = inp.task.data.get("expected_state")
    if not isinstance(expected, dict):
        raise VerifierError(
            f"task {inp.task.task_id}: data.expected_state must be a mapping", "bad_task_data"
        )
    if inp.final_state is None:
        raise VerifierError(
            f"task {inp.task.task_id}: the session has no final state to compare", "missing_state"
        )
    found = list(differences(comparable(expected, params), comparable(inp.final_state, params)))
    if not found:
        return Verdict(1.0, {"reason": "state_matches"})
    return Verdict(
        0.0,
        {
            "reason": "state_differs",
            "first_difference": found[0],
            "differences": found[:MAX_LISTED],
            "difference_count": len(found),
        },
    )
