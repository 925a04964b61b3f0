"""The API key goes to the server and nowhere else, even when the server echoes it back."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from gymflow.config import ModelConfig, Sampling
from gymflow.models.client import REDACTED, ResponsesClient
from gymflow.models.responses import user_message

KEY = "sk-test-0123456789abcdef"


async def _echo_the_key(request: web.Request) -> web.Response:
    """Answers like a provider rejecting a key: the key it was sent, in the error message."""
    sent = request.headers["authorization"].removeprefix("Bearer ")
    error = {"message": f"Incorrect API key provided: {sent}.", "code": "invalid_api_key"}
    return web.json_response({"error": error}, status=401)


def test_key_is_sent_but_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMFLOW_SECRET_FOR_TEST", KEY)

    async def call():
        app = web.Application()
        app.router.add_post("/v1/responses", _echo_the_key)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        base_url = f"http://127.0.0.1:{port}/v1"
        config = ModelConfig(
            kind="responses", base_url=base_url, api_key_env="GYMFLOW_SECRET_FOR_TEST"
        )
        try:
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)
        finally:
            await runner.cleanup()

    outcome = asyncio.run(call())
    (record,) = outcome.calls
    assert record.failure_kind == "client_error" and record.http_status == 401
    stored = json.dumps([record.request, record.response, record.sampling, record.error])
    assert KEY not in stored and KEY not in str(outcome.error)
    assert f"Incorrect API key provided: {REDACTED}" in record.error
