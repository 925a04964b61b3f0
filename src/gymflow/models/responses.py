"""The slice of the OpenAI Responses API that gymflow speaks: input items, tools, output, usage.

Items stay plain dicts inside gymflow (they are stored as JSON verbatim); these schemas validate
what crosses the boundary from a server."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

# TypedDicts, not models: a validated answer stays the plain dict the harnesses and the store use,
# and validating one costs ~1.4 µs against ~10 µs for the equivalent BaseModel tree (measured on
# bench/ceiling.py's answer), which is 4% of the collector's whole budget per rollout. Every level
# keeps the keys it does not name (`extra="allow"`).
_OPEN = ConfigDict(extra="allow")


@with_config(_OPEN)
class InputTokensDetails(TypedDict):
    cached_tokens: NotRequired[int]


@with_config(_OPEN)
class OutputTokensDetails(TypedDict):
    reasoning_tokens: NotRequired[int]


@with_config(_OPEN)
class Usage(TypedDict):
    input_tokens: int
    output_tokens: int
    total_tokens: NotRequired[int | None]
    input_tokens_details: NotRequired[InputTokensDetails | None]
    output_tokens_details: NotRequired[OutputTokensDetails | None]


@with_config(_OPEN)
class OutputItem(TypedDict):
    """message | function_call | reasoning (others are kept as they came)."""

    type: str


@with_config(_OPEN)
class Response(TypedDict):
    id: str
    object: NotRequired[Literal["response"]]
    model: str
    status: NotRequired[str]  # absent means completed
    output: list[OutputItem]
    usage: NotRequired[Usage | None]
    incomplete_details: NotRequired[dict[str, Any] | None]
    error: NotRequired[dict[str, Any] | None]


RESPONSE = TypeAdapter(Response)


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def system_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "system", "content": text}


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


def output_text(items: list[dict[str, Any]]) -> str:
    """The concatenated text of every assistant message among `items`."""
    parts: list[str] = []
    for item in items:
        if item.get("type") != "message" or item.get("role", "assistant") != "assistant":
            continue
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        for part in content or ():
            if part.get("type") in ("output_text", "text"):
                parts.append(part.get("text", ""))
    return "".join(parts)


def refusal_text(items: list[dict[str, Any]]) -> str | None:
    """The text of any refusal content part among assistant messages, or None."""
    parts = [
        part.get("refusal", "")
        for item in items
        if item.get("type") == "message"
        for part in (item.get("content") if isinstance(item.get("content"), list) else ())
        if part.get("type") == "refusal"
    ]
    return "".join(parts) if parts else None


def function_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if item.get("type") == "function_call"]
