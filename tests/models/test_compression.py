"""Hosted APIs compress their answers when the client accepts it; the client must read them."""

from __future__ import annotations

import asyncio
import gzip

import orjson
from aiohttp import web

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import output_text, user_message
from tests.models.conftest import responses_endpoint

ANSWER = {
    "id": "resp_1",
    "object": "response",
    "model": "hosted",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Answer: 42 " * 200}],
        }
    ],
    "usage": {"input_tokens": 9, "output_tokens": 400},
}


async def _gzipped(request: web.Request) -> web.Response:
    assert "gzip" in request.headers.get("accept-encoding", "")
    body = gzip.compress(orjson.dumps(ANSWER))
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    return web.Response(body=body, headers=headers)


def test_a_gzipped_answer_is_read_like_a_plain_one() -> None:
    async def call():
        async with responses_endpoint(_gzipped) as base_url:
            config = ModelConfig(kind="responses", base_url=base_url, max_retries=0)
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    outcome = asyncio.run(call())
    assert outcome.error is None, outcome.error
    assert output_text(outcome.response["output"]) == "Answer: 42 " * 200
    (call,) = outcome.calls
    assert orjson.loads(call.response) == ANSWER and call.output_tokens == 400
