"""Hostile answers at the model boundary: a token count past what the store holds (2**64 - 1,
valid JSON and a non-negative integer) stopped the whole run with "unexpected
ConversionException" and stored nothing; it is now a malformed answer, kept as evidence. A chat
answer that ended in `finish_reason: "error"` was scored on its partial text."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import web

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import user_message
from tests.models.conftest import responses_endpoint
from tests.models.test_hostile_answers import _call, _serving

HUGE = 2**64 - 1


def _answer(usage: dict) -> bytes:
    message = {"type": "output_text", "text": "Answer: 4"}
    return orjson.dumps(
        {
            "id": "r",
            "model": "m",
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [message]}],
            "usage": usage,
        }
    )


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": HUGE, "output_tokens": 1},
        {"input_tokens": 1, "output_tokens": 2**63 - 1},
        {"input_tokens": 1, "output_tokens": 1, "input_tokens_details": {"cached_tokens": HUGE}},
    ],
)
def test_a_token_count_past_the_store_is_a_malformed_answer(usage: dict) -> None:
    body = _answer(usage)

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    async def call():
        async with responses_endpoint(handler) as base_url:
            config = ModelConfig(kind="responses", base_url=base_url, max_retries=0)
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    outcome = asyncio.run(asyncio.wait_for(call(), timeout=60))
    (record,) = outcome.calls
    assert outcome.response is None
    assert record.failure_kind == "malformed_response"
    assert record.response == body.decode()  # the answer as received, as evidence
    assert record.input_tokens is None or record.input_tokens < 2**53


def test_a_chat_answer_that_ended_in_error_is_a_server_error_not_a_score() -> None:
    """`finish_reason: "error"` (a provider failing mid-answer, as OpenRouter reports it) was
    translated to a completed answer and its partial text scored."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "Answ"},
        "finish_reason": "error",
    }
    body = orjson.dumps({"id": "c1", "model": "m", "choices": [choice]})
    outcome = _call(_serving([body]), kind="chat_completions", max_retries=1)
    assert outcome.response is None
    assert [c.failure_kind for c in outcome.calls] == ["server_error"] * 2  # retried, as a 5xx
    assert '"received"' in outcome.calls[0].response  # the completion as it came, kept


@pytest.mark.parametrize("finish_reason", ["content_filter", "refusal"])
def test_a_chat_answer_cut_by_a_content_filter_is_refused_not_scored(finish_reason: str) -> None:
    """A content filter that stops a generation part-way (Azure OpenAI sends the text so far with
    `finish_reason: "content_filter"`) was a completed answer and its partial text scored; the
    Responses API's own `incomplete: content_filter` was already a refusal."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "Step 1: take the"},
        "finish_reason": finish_reason,
    }
    body = orjson.dumps({"id": "c1", "model": "m", "choices": [choice]})
    outcome = _call(_serving([body]), kind="chat_completions", max_retries=1)
    assert outcome.response is None
    assert [c.failure_kind for c in outcome.calls] == ["refused"]  # not retried
    assert "content_filter" in outcome.calls[0].error
    assert "Step 1: take the" in outcome.calls[0].response  # the partial text, kept as evidence


def test_a_completed_response_carrying_an_error_is_a_failure_not_a_score() -> None:
    """A Responses object whose `error` is set while its status says `completed` (a gateway
    relaying a backend failure with what it had) was scored on its text; the importer already
    read such a NeMo Gym line as a failed response."""
    message = {"type": "output_text", "text": "Answer: 4"}
    body = orjson.dumps(
        {
            "id": "r",
            "model": "m",
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [message]}],
            "error": {"code": "server_error", "message": "backend dropped the stream"},
        }
    )
    outcome = _call(_serving([body]), max_retries=1)
    assert outcome.response is None
    assert [c.failure_kind for c in outcome.calls] == ["server_error"] * 2  # retried, as a 5xx
    assert "backend dropped the stream" in outcome.calls[0].error


def test_a_proxy_408_is_a_timeout_that_is_retried() -> None:
    """nginx and cloud load balancers answer 408 when they stop waiting for the model: it was
    `client_error`, never retried and never run again by `--resume`."""
    message = {"type": "output_text", "text": "Answer: 4"}
    answer = orjson.dumps(
        {
            "id": "r",
            "model": "m",
            "output": [{"type": "message", "role": "assistant", "content": [message]}],
        }
    )
    answered: list[int] = []

    async def handler(request: web.Request) -> web.Response:
        answered.append(len(answered))
        if len(answered) == 1:
            return web.Response(status=408, text="<html>408 Request Time-out</html>")
        return web.Response(body=answer, content_type="application/json")

    outcome = _call(handler, max_retries=1)
    assert outcome.response is not None
    assert [(c.failure_kind, c.http_status) for c in outcome.calls] == [
        ("timeout", 408),
        (None, 200),
    ]
