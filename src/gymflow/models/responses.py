"""The slice of the OpenAI Responses API that gymflow speaks: input items, tools, output, usage.

Items stay plain dicts inside gymflow (they are stored as JSON verbatim); these models validate
what crosses the boundary from a server."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class InputTokensDetails(BaseModel):
    model_config = ConfigDict(extra="allow")
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    model_config = ConfigDict(extra="allow")
    reasoning_tokens: int = 0


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")
    input_tokens: int
    output_tokens: int
    total_tokens: int | None = None
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()


class IncompleteDetails(BaseModel):
    model_config = ConfigDict(extra="allow")
    reason: str | None = None


class OutputItem(BaseModel):
    """message | function_call | reasoning (others are kept as they came)."""

    model_config = ConfigDict(extra="allow")
    type: str


class Response(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"] = "response"
    model: str
    status: str = "completed"
    output: list[OutputItem] = Field(default_factory=list)
    usage: Usage | None = None
    incomplete_details: IncompleteDetails | None = None
    error: dict[str, Any] | None = None


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
