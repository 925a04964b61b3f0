"""The chat-completions adapter: a lossless round trip of items and tools, and the tool loop over
a real `/v1/chat/completions` server giving the same conversation as over `/v1/responses`."""

from __future__ import annotations

import asyncio

from gymflow.core.config import ModelConfig
from gymflow.environments.base import Environment
from gymflow.models.chat_adapter import (
    chat_to_request,
    completion_to_response,
    request_to_chat,
    response_to_completion,
)
from gymflow.simulated.local_server import LocalPolicyServer
from tests.models.conftest import play_ledger

ITEMS = [
    {"type": "message", "role": "system", "content": "Be brief."},
    {"type": "message", "role": "user", "content": "Deposit 3 and 9."},
    {"type": "function_call", "call_id": "a", "name": "deposit", "arguments": '{"amount": 3}'},
    {"type": "function_call", "call_id": "b", "name": "deposit", "arguments": '{"amount": 9}'},
    {"type": "function_call_output", "call_id": "a", "output": '{"balance": 3}'},
    {"type": "function_call_output", "call_id": "b", "output": '{"balance": 12}'},
    {"type": "message", "role": "assistant", "content": "Done: 12."},
    {"type": "message", "role": "user", "content": "Thanks."},
]
TOOLS = [
    {
        "type": "function",
        "name": "deposit",
        "description": "Add money.",
        "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}},
    }
]


def test_request_round_trip() -> None:
    body = {
        "model": "m",
        "input": ITEMS,
        "tools": TOOLS,
        "temperature": 0.5,
        "top_p": 0.8,
        "seed": 4,
        "max_output_tokens": 64,
        "reasoning": {"effort": "high"},
    }
    chat = request_to_chat(body)
    assert chat["messages"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {"name": "deposit", "arguments": '{"amount": 3}'},
            },
            {
                "id": "b",
                "type": "function",
                "function": {"name": "deposit", "arguments": '{"amount": 9}'},
            },
        ],
    }
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "a", "content": '{"balance": 3}'}
    assert chat["tools"][0]["function"]["name"] == "deposit"
    assert (chat["max_tokens"], chat["reasoning_effort"]) == (64, "high")
    assert chat_to_request(chat) == body


def test_response_round_trip_with_calls_reasoning_and_truncation() -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 7,
        "model": "m",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {
                "type": "reasoning",
                "id": "rs_chatcmpl-1",
                "summary": [{"type": "summary_text", "text": "hmm"}],
            },
            {
                "type": "message",
                "id": "msg_chatcmpl-1",
                "role": "assistant",
                "status": "incomplete",
                "content": [{"type": "output_text", "text": "Let me", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_chatcmpl-1_0",
                "call_id": "c1",
                "name": "deposit",
                "arguments": '{"amount": 1}',
                "status": "completed",
            },
        ],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 6,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 16,
        },
    }
    completion = response_to_completion(response)
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["choices"][0]["message"]["reasoning_content"] == "hmm"
    back = completion_to_response(completion)
    assert back == {**response, "id": "chatcmpl-1"}


def test_refusal_becomes_a_refusal_part() -> None:
    completion = {
        "id": "x",
        "model": "m",
        "choices": [{"message": {"role": "assistant", "content": None, "refusal": "No."}}],
    }
    output = completion_to_response(completion)["output"]
    assert output[0]["content"] == [{"type": "refusal", "refusal": "No."}]


def _conversation(trajectory: list[dict]) -> list[tuple]:
    """What the conversation says, without server-chosen ids."""
    view = []
    for item in trajectory:
        kind = item.get("type")
        if kind == "function_call":
            view.append((kind, item["call_id"], item["name"], item["arguments"]))
        elif kind == "function_call_output":
            view.append((kind, item["call_id"], item["output"]))
        elif kind == "message":
            content = item["content"]
            text = content if isinstance(content, str) else content[0]["text"]
            view.append((kind, item["role"], text))
    return view


def test_tool_loop_over_chat_completions_matches_responses(
    ledger: Environment, ledger_table
) -> None:
    async def run_all(base_url: str, kind: str):
        config = ModelConfig(kind=kind, base_url=base_url, seed_in="body")
        results = await play_ledger(ledger, base_url, seed=11, concurrency=4, config=config)
        return [(episode, verdict.reward) for episode, verdict in results]

    with LocalPolicyServer(ledger_table, seed=0) as policy:
        over_responses = asyncio.run(run_all(policy.base_url, "responses"))
        over_chat = asyncio.run(run_all(policy.base_url, "chat_completions"))
    assert any(e.counters["tool_calls"] for e, _ in over_chat)
    for (a, reward_a), (b, reward_b) in zip(over_responses, over_chat, strict=True):
        assert b.failure_kind is None
        assert _conversation(b.trajectory) == _conversation(a.trajectory)
        assert (b.num_turns, b.counters, reward_b) == (a.num_turns, a.counters, reward_a)


def test_lenient_with_servers_that_omit_ids_or_send_argument_objects() -> None:
    completion = {
        "id": "c9",
        "model": "m",
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "deposit", "arguments": {"amount": 2}}}],
                },
            }
        ],
    }
    (call,) = completion_to_response(completion)["output"]
    assert (call["call_id"], call["arguments"]) == ("call_c9_0", '{"amount": 2}')
