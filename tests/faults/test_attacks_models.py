"""Hostile answers at the model boundary: a token count past what the store holds (2**64 - 1,
valid JSON and a non-negative integer) stopped the whole run with "unexpected
ConversionException" and stored nothing; it is now a malformed answer, kept as evidence."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import web

from gymflow.config import ModelConfig, Sampling
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import user_message
from tests.models.conftest import responses_endpoint

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
