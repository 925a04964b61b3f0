"""A whole answer told as a server-sent event stream, for a client that asked to stream.

The recording proxy asks its upstream for whole answers (one JSON object to validate and keep as
the call's evidence) and, when the agent asked for `stream: true`, tells that answer as the event
stream the agent's SDK expects: the Responses API's typed events (`response.created` ...
`response.completed`) or chat completion chunks ending in `data: [DONE]`. Pure functions: an
answer in, the bytes of the stream out."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import orjson


def _event(payload: dict[str, Any], *, named: bool) -> bytes:
    head = f"event: {payload['type']}\n".encode() if named else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _opening(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as `output_item.added` announces it: before any of its content."""
    opened = {**item, "status": "in_progress"}
    if item.get("type") == "message":
        opened["content"] = []
    elif item.get("type") == "function_call":
        opened["arguments"] = ""
    elif item.get("type") == "reasoning":
        opened["summary"] = []
    return opened


def _item_events(item: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
    item_id = item.get("id", "")
    yield {"type": "response.output_item.added", "output_index": index, "item": _opening(item)}
    if item.get("type") == "message":
        for part_index, part in enumerate(item.get("content") or ()):
            where = {"item_id": item_id, "output_index": index, "content_index": part_index}
            empty = {**part, "text": ""} if part.get("type") == "output_text" else part
            yield {"type": "response.content_part.added", **where, "part": empty}
            if part.get("type") == "output_text":
                text = part.get("text", "")
                yield {"type": "response.output_text.delta", **where, "delta": text, "logprobs": []}
                yield {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
            elif part.get("type") == "refusal":
                refusal = part.get("refusal", "")
                yield {"type": "response.refusal.delta", **where, "delta": refusal}
                yield {"type": "response.refusal.done", **where, "refusal": refusal}
            yield {"type": "response.content_part.done", **where, "part": part}
    elif item.get("type") == "function_call":
        where = {"item_id": item_id, "output_index": index}
        arguments = item.get("arguments", "")
        yield {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
        yield {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


#: The closing event for each final status of a response.
_CLOSING = {"completed": "response.completed", "incomplete": "response.incomplete"}


def response_events(response: dict[str, Any]) -> bytes:
    """The Responses API event stream of a whole `response`, each event numbered in order."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(response.get("output") or ()):
        events.extend(_item_events(item, index))
    closing = _CLOSING.get(response.get("status") or "completed", "response.failed")
    events.append({"type": closing, "response": response})
    numbers = itertools.count()
    return b"".join(
        _event({**event, "sequence_number": next(numbers)}, named=True) for event in events
    )


def completion_chunks(completion: dict[str, Any], *, include_usage: bool) -> bytes:
    """The chat completions stream of a whole `completion`: the role, the text, each tool call,
    the finish reason, then (when the client asked, `stream_options.include_usage`) the usage in a
    chunk with no choices, and `[DONE]`."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for key in ("reasoning_content", "content", "refusal"):
        if message.get(key):
            chunks.append(chunk({key: message[key]}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion.get("usage")})
    return b"".join(_event(c, named=False) for c in chunks) + b"data: [DONE]\n\n"
