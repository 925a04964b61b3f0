"""Checking a model's tool arguments before they reach a tool.

A model writes tool arguments as JSON text. Text that does not parse, is not an object, or does not
fit the tool's JSON schema is a malformed call: the model hears why, and the tool never runs."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError


class MalformedArguments(ValueError):
    """Arguments the tool cannot be called with; the message is what the model is told."""


@lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> Draft202012Validator | None:
    schema = orjson.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        # The environment's schema is broken, not the model's call: the tool itself decides.
        return None
    return Draft202012Validator(schema)


def parse_arguments(raw: object, schema: dict[str, Any] | None) -> dict[str, Any]:
    """The arguments as a dict, checked against `schema` (a tool's `parameters`) when given."""
    if isinstance(raw, dict):
        arguments = raw
    else:
        try:
            arguments = json.loads(raw if isinstance(raw, str) else "")
        except json.JSONDecodeError as exc:
            raise MalformedArguments(f"arguments are not valid JSON ({exc.msg})") from None
        except RecursionError:  # `[[[[…` 5,000 deep: the model's malformed call, not our crash
            raise MalformedArguments("arguments nest too deeply to read") from None
    if not isinstance(arguments, dict):
        raise MalformedArguments(f"arguments must be a JSON object, not {type(arguments).__name__}")
    # The cache key is the schema's canonical text: orjson's, a tenth of json.dumps's cost, which
    # was paid on every tool call.
    validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)) if schema else None
    if validator is not None:
        problem = next(iter(validator.iter_errors(arguments)), None)
        if problem is not None:
            where = ".".join(str(part) for part in problem.path) or "arguments"
            raise MalformedArguments(f"{where}: {problem.message}")
    return arguments
