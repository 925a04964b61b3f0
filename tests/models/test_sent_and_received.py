"""What crosses the boundary: each API is sent only what it documents (`seed` where `model.seed_in`
puts it, and `sampling` records exactly that), and a chat gateway's answer is kept as received
beside its translation, with every dialect of refusal mapped to `refused`."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import web

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import output_text, user_message
from tests.models.conftest import responses_endpoint

PATHS = {"responses": "/v1/responses", "chat_completions": "/v1/chat/completions"}
ANSWERS = {
    "responses": {
        "id": "resp_1",
        "model": "m",
        "output": [{"type": "message", "role": "assistant", "content": "4"}],
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
    "chat_completions": {
        "id": "c1",
        "model": "m",
        "choices": [{"message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    },
}


def _call(kind: str, answer: dict[str, Any], seen: list[dict[str, Any]], **model) -> CallOutcome:
    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response(answer)

    async def go() -> CallOutcome:
        async with responses_endpoint(handler, PATHS[kind]) as base_url:
            config = ModelConfig.model_validate(
                {"kind": kind, "base_url": base_url, "max_retries": 0, **model}
            )
            sampling = Sampling(temperature=0.5, max_output_tokens=64)
            async with ResponsesClient(config, base_url, sampling) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=7)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("kind", "seed_in", "sent"),
    [
        ("responses", None, {}),  # not a Responses API parameter: strict servers answer 422
        ("responses", "none", {}),
        ("responses", "body", {"seed": 7}),
        ("responses", "metadata", {"metadata": {"seed": "7"}}),
        ("chat_completions", None, {"seed": 7}),  # documented by chat completions
        ("chat_completions", "none", {}),
        ("chat_completions", "metadata", {"metadata": {"seed": "7"}}),
    ],
)
def test_the_seed_goes_where_seed_in_says_and_sampling_records_it(
    kind: str, seed_in: str | None, sent: dict[str, Any]
) -> None:
    seen: list[dict[str, Any]] = []
    outcome = _call(kind, ANSWERS[kind], seen, seed_in=seed_in)
    assert outcome.error is None
    (body,) = seen
    assert {key: body[key] for key in ("seed", "metadata") if key in body} == sent
    limit = "max_tokens" if kind == "chat_completions" else "max_output_tokens"
    assert body["temperature"] == 0.5 and body[limit] == 64
    # recorded under the Responses API's names whatever the server kind
    assert outcome.calls[0].sampling == {
        "temperature": 0.5,
        "top_p": 1.0,
        "max_output_tokens": 64,
        **sent,
    }


def test_seed_in_is_a_closed_choice() -> None:
    with pytest.raises(ValueError, match="seed_in"):
        ModelConfig(seed_in="header")


def _chat(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}}
    return ANSWERS["chat_completions"] | {"choices": [choice | {"finish_reason": finish_reason}]}


REFUSALS = {
    # LiteLLM's proxy: no content, the provider's refusal in provider_specific_fields
    "litellm provider_specific_fields": _chat(
        {"content": None, "provider_specific_fields": {"refusal": "I can't help with that."}}
    ),
    # OpenAI chat completions
    "openai message.refusal": _chat({"content": None, "refusal": "I can't help with that."}),
    # a provider's content filter (Azure OpenAI, Gemini through a gateway)
    "content_filter finish": _chat({"content": None}, finish_reason="content_filter"),
    "refusal finish": _chat({"content": ""}, finish_reason="refusal"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_gateway_refusals_are_refused_with_the_answer_as_received(name: str) -> None:
    answer = REFUSALS[name]
    outcome = _call("chat_completions", answer, [])
    (call,) = outcome.calls
    assert outcome.error is not None and call.failure_kind == "refused"
    assert outcome.response is None  # never a completed answer to score
    evidence = orjson.loads(call.response)
    assert evidence["received"] == answer
    (message,) = (item for item in evidence["output"] if item["type"] == "message")
    assert [part["type"] for part in message["content"]] == ["refusal"]
    assert call.input_tokens == 5  # the refused call still used (and reports) its tokens


def test_a_completed_chat_answer_keeps_the_completion_beside_the_translation() -> None:
    answer = _chat(
        {"content": "4", "provider_specific_fields": {"citations": None}, "reasoning": "2+2"}
    )
    outcome = _call("chat_completions", answer, [])
    assert outcome.error is None and output_text(outcome.response["output"]) == "4"
    evidence = orjson.loads(outcome.calls[0].response)
    assert evidence["received"] == answer
    assert evidence["output"] == outcome.response["output"]
    assert [item["type"] for item in evidence["output"]] == ["reasoning", "message"]


def test_an_empty_chat_answer_is_an_empty_message_and_no_answer_is_none() -> None:
    empty = _call("chat_completions", _chat({"content": ""}), [])
    assert empty.error is None and empty.response["output"][0]["type"] == "message"
    assert output_text(empty.response["output"]) == ""
    nothing = _call("chat_completions", _chat({"content": None}), [])
    assert nothing.calls[0].failure_kind == "response_not_run"


def test_content_as_a_list_of_parts_is_read_as_text() -> None:
    answer = _chat({"content": [{"type": "text", "text": "4"}, {"type": "text", "text": "2"}]})
    outcome = _call("chat_completions", answer, [])
    assert outcome.error is None and output_text(outcome.response["output"]) == "42"


def test_a_responses_content_filter_is_refused() -> None:
    answer = ANSWERS["responses"] | {
        "status": "incomplete",
        "incomplete_details": {"reason": "content_filter"},
        "output": [],
    }
    outcome = _call("responses", answer, [])
    assert outcome.calls[0].failure_kind == "refused"
