"""Responses API shapes as NeMo Gym 0.4's typed models accept them: a request
(`NeMoGymResponseCreateParamsNonStreaming`, which forbids any field it does not know, `seed`
included), its items, and a rollout as one response (`NeMoGymResponse`). Shared by the export
(`gymflow.interop.nemo_export`) and the requests sent to a NeMo Gym server's `/verify`."""

from __future__ import annotations

import json
from typing import Any

#: The request fields NeMo Gym's request model allows (it forbids any other, `seed` included).
REQUEST_FIELDS = (
    "background",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
)


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return tool
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        "strict": bool(tool.get("strict", False)),
    }


def nemo_request(request: dict[str, Any]) -> dict[str, Any]:
    """A request NeMo Gym's request model accepts: its fields only, its defaults filled."""
    shaped = {k: request[k] for k in REQUEST_FIELDS if request.get(k) is not None}
    given = request.get("input") or []
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    shaped["input"] = [nemo_item(item, f"in{i}") for i, item in enumerate(given)]
    shaped["tools"] = [_tool(tool) for tool in request.get("tools") or []]
    shaped.setdefault("parallel_tool_calls", True)
    shaped.setdefault("tool_choice", "auto")
    if isinstance(shaped.get("metadata"), dict):  # the Responses API's metadata is text to text
        shaped["metadata"] = {
            str(k): v if isinstance(v, str) else json.dumps(v)
            for k, v in shaped["metadata"].items()
        }
    return shaped


def nemo_item(item: dict[str, Any], name: str) -> dict[str, Any]:
    """An item as NeMo Gym's item models want it: assistant messages as output messages (id,
    status, content parts with annotations), tool outputs as text, reasoning with a summary."""
    kind = item.get("type", "message")
    if kind == "message" and item.get("role", "assistant") == "assistant":
        content = item.get("content")
        parts = [{"type": "output_text", "text": content}] if isinstance(content, str) else content
        return {
            "id": item.get("id") or f"msg_{name}",
            "type": "message",
            "role": "assistant",
            "status": item.get("status") or "completed",
            "content": [
                part if part.get("type") == "refusal" else {"annotations": [], **part}
                for part in parts or []
            ],
        }
    if kind == "function_call_output" and not isinstance(item.get("output"), str):
        return {**item, "output": json.dumps(item.get("output"))}
    if kind == "reasoning":
        return {**item, "id": item.get("id") or f"rs_{name}", "summary": item.get("summary") or []}
    return item


def nemo_response(
    response_id: str,
    request: dict[str, Any],
    output: list[dict[str, Any]],
    *,
    model: str,
    created_at: float,
    incomplete: bool,
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """A rollout as NeMo Gym's agents hand it to `/verify` and write it: one response whose
    output is every item after the request's input (each turn's output and tool outputs), with
    the request's tool settings (`request` as `nemo_request` shapes it)."""
    name = response_id.removeprefix("resp_")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "output": [nemo_item(item, f"{name}_{i}") for i, item in enumerate(output)],
        "parallel_tool_calls": request["parallel_tool_calls"],
        "tool_choice": request["tool_choice"],
        "tools": request["tools"],
        "usage": usage,
    }


def usage(input_tokens: int | None, output_tokens: int | None) -> dict[str, Any] | None:
    """Responses usage with both details objects, as NeMo Gym's models require; None unless
    both counts are known."""
    if input_tokens is None or output_tokens is None:
        return None
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
