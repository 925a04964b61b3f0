"""The API key goes to the server and nowhere else, even when the server echoes it back."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from gymflow.config import ModelConfig, Sampling
from gymflow.models.client import REDACTED, ResponsesClient
from gymflow.models.responses import user_message
from tests.models.conftest import responses_endpoint

KEY = "sk-test-0123456789abcdef"


async def _echo_the_key(request: web.Request) -> web.Response:
    """Answers like a provider rejecting a key: the key it was sent, in the error message."""
    sent = request.headers["authorization"].removeprefix("Bearer ")
    error = {"message": f"Incorrect API key provided: {sent}.", "code": "invalid_api_key"}
    return web.json_response({"error": error}, status=401)


def test_key_is_sent_but_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMFLOW_SECRET_FOR_TEST", KEY)

    async def call():
        async with responses_endpoint(_echo_the_key) as base_url:
            config = ModelConfig(
                kind="responses", base_url=base_url, api_key_env="GYMFLOW_SECRET_FOR_TEST"
            )
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    outcome = asyncio.run(call())
    (record,) = outcome.calls
    assert record.failure_kind == "client_error" and record.http_status == 401
    stored = json.dumps([record.request, record.response, record.sampling, record.error])
    assert KEY not in stored and KEY not in str(outcome.error)
    assert f"Incorrect API key provided: {REDACTED}" in record.error
