"""Translation between Responses API items and `/v1/chat/completions` messages, both ways.

The client uses `request_to_chat` and `completion_to_response` so that a server speaking only chat
completions (vLLM, SGLang, Ollama) looks like a Responses API server to harnesses and the store.
The local policy server uses the inverse pair, `chat_to_request` and `response_to_completion`, so
the adapter is tested against a real HTTP server.

Chat completions has no place for reasoning items on input: they stay in the trajectory but are not
sent. A reasoning text a server returns (`reasoning_content`, as vLLM and SGLang do) becomes a
`reasoning` item.

A completion is validated (`COMPLETION`) before it is translated, so a wrong type is a malformed
response, not an error inside the translation. Refusals come in three dialects and all become a
`refusal` content part: OpenAI's `message.refusal`, LiteLLM's `content: null` with the refusal in
`message.provider_specific_fields.refusal`, and a `content_filter` (or `refusal`) finish reason
with no text."""

from __future__ import annotations

import json
from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict

from gymflow.models.responses import MAX_TOKENS

#: The chat finish reason that means the output was cut off.
_LENGTH = "length"
#: The finish reason of a generation the provider stopped by failing.
_ERROR = "error"
#: Finish reasons that mean the provider withheld the answer on content grounds.
_FILTERED = ("content_filter", "refusal")

_OPEN = ConfigDict(extra="allow", strict=True)
_Count = Annotated[int, Field(ge=0, lt=MAX_TOKENS)]


@with_config(_OPEN)
class _Part(TypedDict):
    type: str
    text: NotRequired[str]


@with_config(_OPEN)
class _Function(TypedDict):
    name: str
    # some servers send the arguments as an object rather than JSON text
    arguments: NotRequired[str | dict[str, Any] | None]


@with_config(_OPEN)
class _ToolCall(TypedDict):
    id: NotRequired[str | None]
    function: _Function


@with_config(_OPEN)
class _Message(TypedDict):
    content: NotRequired[str | list[_Part] | None]
    refusal: NotRequired[str | None]
    reasoning_content: NotRequired[str | None]
    reasoning: NotRequired[str | None]
    tool_calls: NotRequired[list[_ToolCall] | None]
    provider_specific_fields: NotRequired[dict[str, Any] | None]


@with_config(_OPEN)
class _Choice(TypedDict):
    message: _Message
    finish_reason: NotRequired[str | None]


@with_config(_OPEN)
class _Usage(TypedDict):
    prompt_tokens: NotRequired[_Count | None]
    completion_tokens: NotRequired[_Count | None]
    total_tokens: NotRequired[_Count | None]
    prompt_tokens_details: NotRequired[dict[str, Any] | None]
    completion_tokens_details: NotRequired[dict[str, Any] | None]


@with_config(_OPEN)
class ChatCompletion(TypedDict):
    id: str
    model: str
    created: NotRequired[int | None]
    choices: Annotated[list[_Choice], Field(min_length=1)]
    usage: NotRequired[_Usage | None]


COMPLETION = TypeAdapter(ChatCompletion)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "")
        for part in content or ()
        if part.get("type") in ("input_text", "output_text", "text")
    )


def _refusal_of(content: Any) -> str | None:
    if isinstance(content, str):
        return None
    refusals = [part.get("refusal", "") for part in content or () if part.get("type") == "refusal"]
    return "".join(refusals) if refusals else None


# -- client side: Responses -> chat -> Responses ---------------------------------------------------
def items_to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            message: dict[str, Any] = {
                "role": "system" if role == "developer" else role,
                "content": _text_of(item.get("content")),
            }
            refusal = _refusal_of(item.get("content"))
            if refusal is not None:
                message["refusal"] = refusal
            messages.append(message)
        elif kind == "function_call":
            last: dict[str, Any] | None = messages[-1] if messages else None
            # One assistant turn's text and its (parallel) calls are one chat message. A turn
            # of calls alone says so with empty text, not null: the API allows both, but
            # llama-cpp-python's server refuses null (its schema types content as a string)
            # and its tool-calling chat format fails on a missing content (HTTP 500 for both).
            if last is None or last["role"] != "assistant" or "tool_call_id" in last:
                last = {"role": "assistant", "content": ""}
                messages.append(last)
            last.setdefault("tool_calls", []).append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments", "")},
                }
            )
        elif kind == "function_call_output":
            output = item.get("output", "")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
    return messages


def tools_to_chat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chat_tools = []
    for tool in tools:
        if tool.get("type") != "function":
            continue
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {}}
        if tool.get("description"):
            function["description"] = tool["description"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def request_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API request body as a chat completions request body."""
    chat: dict[str, Any] = {"model": body["model"], "messages": items_to_messages(body["input"])}
    if body.get("tools"):
        chat["tools"] = tools_to_chat(body["tools"])
    # tool_choice's text values (auto, required, none) mean the same in both APIs.
    for key in ("temperature", "top_p", "seed", "metadata", "tool_choice"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    effort = (body.get("reasoning") or {}).get("effort")
    if effort:
        chat["reasoning_effort"] = effort
    return chat


def _refusal_in(message: dict[str, Any], finish_reason: str | None) -> str | None:
    refusal = message.get("refusal") or (message.get("provider_specific_fields") or {}).get(
        "refusal"
    )
    if refusal:
        return str(refusal)
    if finish_reason in _FILTERED and not message.get("content") and not message.get("tool_calls"):
        return f"no answer: finish_reason {finish_reason}"
    return None


def completion_to_response(completion: dict[str, Any]) -> dict[str, Any]:
    """A chat completion, validated by `COMPLETION`, as a Responses API object."""
    choice = completion["choices"][0]
    message = choice["message"]
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{completion['id']}",
                "summary": [{"type": "summary_text", "text": reasoning}],
            }
        )
    incomplete = choice.get("finish_reason") == _LENGTH
    # Withheld on content grounds, even with part of an answer sent (Azure's content filter cuts
    # a generation mid-way): what the Responses API says of it, so it is a refusal, not a score.
    filtered = choice.get("finish_reason") in _FILTERED
    parts: list[dict[str, Any]] = []
    text = _text_of(message.get("content"))
    if text:
        parts.append({"type": "output_text", "text": text, "annotations": []})
    refusal = _refusal_in(message, choice.get("finish_reason"))
    if refusal is not None:
        parts.append({"type": "refusal", "refusal": refusal})
    if not parts and isinstance(message.get("content"), str) and not message.get("tool_calls"):
        # an empty answer is still an answer (a message with no text), not an empty output
        parts.append({"type": "output_text", "text": "", "annotations": []})
    if parts:
        output.append(
            {
                "type": "message",
                "id": f"msg_{completion['id']}",
                "role": "assistant",
                "status": "incomplete" if incomplete else "completed",
                "content": parts,
            }
        )
    for index, call in enumerate(message.get("tool_calls") or ()):
        arguments = call["function"].get("arguments") or ""
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{completion['id']}_{index}",
                # Some servers omit the id, or send arguments as an object rather than JSON text.
                "call_id": call.get("id") or f"call_{completion['id']}_{index}",
                "name": call["function"]["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "status": "completed",
            }
        )
    response: dict[str, Any] = {
        "id": completion["id"],
        "object": "response",
        "created_at": completion.get("created", 0),
        "model": completion["model"],
        "status": "incomplete" if incomplete or filtered else "completed",
        "incomplete_details": (
            {"reason": "max_output_tokens"}
            if incomplete
            else {"reason": "content_filter"}
            if filtered
            else None
        ),
        "output": output,
    }
    if choice.get("finish_reason") == _ERROR:
        # the provider failed mid-answer (OpenRouter's normalized reason): what came is no answer
        response["status"] = "failed"
        response["error"] = {"code": "server_error", "message": "finish_reason error"}
    usage = completion.get("usage")
    if usage:
        prompt_details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        response["usage"] = {
            "input_tokens": usage.get("prompt_tokens") or 0,
            "input_tokens_details": {"cached_tokens": prompt_details.get("cached_tokens") or 0},
            "output_tokens": usage.get("completion_tokens") or 0,
            "output_tokens_details": {
                "reasoning_tokens": completion_details.get("reasoning_tokens") or 0
            },
            "total_tokens": usage.get("total_tokens"),
        }
    return response


# -- server side: chat -> Responses -> chat --------------------------------------------------------
def chat_to_request(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat completions request body as a Responses API request body."""
    items: list[dict[str, Any]] = []
    for message in chat.get("messages") or ():
        role = message.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id", ""),
                    "output": _text_of(message.get("content")),
                }
            )
            continue
        text = _text_of(message.get("content"))
        if text or not message.get("tool_calls"):
            items.append({"type": "message", "role": role, "content": text})
        for call in message.get("tool_calls") or ():
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id", ""),
                    "name": call["function"]["name"],
                    "arguments": call["function"].get("arguments", ""),
                }
            )
    body: dict[str, Any] = {"model": chat.get("model"), "input": items}
    tools = [
        {"type": "function", **tool["function"]}
        for tool in chat.get("tools") or ()
        if tool.get("type") == "function"
    ]
    if tools:
        body["tools"] = tools
    for key in ("temperature", "top_p", "seed", "metadata", "tool_choice"):
        if chat.get(key) is not None:
            body[key] = chat[key]
    limit = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if limit is not None:
        body["max_output_tokens"] = limit
    if chat.get("reasoning_effort"):
        body["reasoning"] = {"effort": chat["reasoning_effort"]}
    return body


def response_to_completion(response: dict[str, Any]) -> dict[str, Any]:
    """A Responses API object as a chat completion."""
    output = response.get("output") or []
    text = "".join(_text_of(i.get("content")) for i in output if i.get("type") == "message")
    refusal = "".join(
        _refusal_of(i.get("content")) or "" for i in output if i.get("type") == "message"
    )
    reasoning = "".join(
        part.get("text", "")
        for item in output
        if item.get("type") == "reasoning"
        for part in item.get("summary") or ()
    )
    calls = [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item.get("arguments", "")},
        }
        for item in output
        if item.get("type") == "function_call"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if refusal:
        message["refusal"] = refusal
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    if response.get("status") == "incomplete":
        finish = _LENGTH
    else:
        finish = "tool_calls" if calls else "stop"
    completion: dict[str, Any] = {
        "id": response["id"].replace("resp_", "chatcmpl-", 1),
        "object": "chat.completion",
        "created": response.get("created_at", 0),
        "model": response["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    usage = response.get("usage")
    if usage:
        completion["usage"] = {
            "prompt_tokens": usage["input_tokens"],
            "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            "prompt_tokens_details": {
                "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
            },
            "completion_tokens_details": {
                "reasoning_tokens": (usage.get("output_tokens_details") or {}).get(
                    "reasoning_tokens", 0
                )
            },
        }
    return completion
