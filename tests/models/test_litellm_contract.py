"""Contract tests against LiteLLM's proxy, an OpenAI-compatible server gymflow did not write.

The proxy runs from its own venv (`GYMFLOW_LITELLM_VENV`, default /tmp/litellm-venv; .ci/run
creates it: installing it beside gymflow would change Prefect's dependencies) on 127.0.0.1, with
mock responses (`mock_response`, `mock_tool_calls`) for the chat path and for LiteLLM's Responses
bridge. Errors on the native Responses path cannot be mocked in LiteLLM, so those models point
LiteLLM at a small upstream here that answers as OpenAI does when it fails; the answer gymflow
reads is still the one LiteLLM makes of it. Skipped locally without the venv, a failure in CI."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
import yaml
from aiohttp import web

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import function_calls, function_tool, output_text, user_message
from gymflow.simulated.local_server import free_port
from tests.conftest import gym
from tests.servers import litellm_proxy, litellm_venv

MASTER_KEY = "sk-gymflow-contract-0123456789"
KEY_ENV = "GYMFLOW_LITELLM_TEST_KEY"
ADD = function_tool(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
}
LITELLM_REFUSAL = {
    "id": "chatcmpl-refusal",
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {
                "role": "assistant",
                "content": None,
                "provider_specific_fields": {"refusal": "I can't help with that."},
            },
        }
    ],
}
#: Azure OpenAI's content filter stopping a generation part-way: the text so far, then the reason.
LITELLM_FILTERED = {
    "id": "chatcmpl-filtered",
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "finish_reason": "content_filter",
            "message": {"role": "assistant", "content": "Step 1: mix the"},
        }
    ],
}
#: Upstream answers for the native Responses path, as OpenAI sends them.
UPSTREAM_ERRORS = {
    "up-429": (429, "Rate limit reached for requests", "rate_limit_exceeded"),
    "up-500": (500, "The server had an error while processing your request.", "server_error"),
    "up-context": (
        400,
        "This model's maximum context length is 128000 tokens.",
        "context_length_exceeded",
    ),
    "up-401": (401, "Incorrect API key provided.", "invalid_api_key"),
}


def _models(upstream: str) -> list[dict[str, Any]]:
    mock = {"model": "openai/gpt-4o-mini", "api_key": "upstream-unused"}
    # A provider without a native Responses API: LiteLLM bridges /v1/responses to its chat path,
    # where mock_tool_calls and dict mock answers apply.
    bridged = {"model": "deepseek/deepseek-chat", "api_key": "upstream-unused"}
    models = {
        "mock-text": {**mock, "mock_response": "Answer: 4"},
        "mock-tools": {**mock, "mock_response": "", "mock_tool_calls": [TOOL_CALL]},
        "mock-429": {**mock, "mock_response": "litellm.RateLimitError"},
        "mock-500": {**mock, "mock_response": "litellm.InternalServerError"},
        "mock-context": {**mock, "mock_response": "litellm.ContextWindowExceededError"},
        "mock-refusal": {**mock, "mock_response": LITELLM_REFUSAL},
        "bridged-tools": {**bridged, "mock_response": "", "mock_tool_calls": [TOOL_CALL]},
        "bridged-refusal": {**bridged, "mock_response": LITELLM_REFUSAL},
        "mock-filtered": {**mock, "mock_response": LITELLM_FILTERED},
        "bridged-filtered": {**bridged, "mock_response": LITELLM_FILTERED},
    }
    for name in UPSTREAM_ERRORS:
        models[name] = {
            "model": f"openai/{name}",
            "api_base": upstream,
            "api_key": "upstream-key",
            "max_retries": 0,
        }
    return [{"model_name": name, "litellm_params": params} for name, params in models.items()]


class _Upstream:
    """The OpenAI-like server behind LiteLLM for the native Responses path: every model fails."""

    def __init__(self) -> None:
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        status, message, code = UPSTREAM_ERRORS[body["model"]]
        error = {"message": message, "type": "invalid_request_error", "code": code}
        return web.json_response({"error": error}, status=status)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/responses", self._answer)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> str:
        self._thread.start()
        self._ready.wait(10)
        return f"http://127.0.0.1:{self.port}/v1"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`litellm --config` on a free 127.0.0.1 port; yields its base URL (…/v1)."""
    litellm_venv()  # skipped (or failed in CI) before the upstream starts
    folder = tmp_path_factory.mktemp("litellm")
    with _Upstream() as upstream:
        config = {
            "model_list": _models(upstream),
            "litellm_settings": {"num_retries": 0},
            # a failing mock must not cool its deployment down for the next test
            "router_settings": {"disable_cooldowns": True},
            "general_settings": {"master_key": MASTER_KEY},
        }
        with litellm_proxy(config, folder) as url:
            yield url


def _create(
    proxy: str, kind: str, model: str, *, tools: bool = False, keyed: bool = True, **extra
) -> CallOutcome:
    config = ModelConfig(
        kind=kind,
        base_url=proxy,
        name=model,
        api_key_env=KEY_ENV if keyed else None,
        max_retries=0,
        **extra,
    )

    async def go() -> CallOutcome:
        async with ResponsesClient(config, proxy, Sampling(temperature=0.7)) as client:
            items = [user_message("What is 2 + 2?")]
            return await client.create(items, tools=[ADD] if tools else None, call_index=0, seed=3)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, MASTER_KEY)
        return asyncio.run(go())


KINDS = ("chat_completions", "responses")


@pytest.mark.parametrize("kind", KINDS)
def test_a_text_answer(proxy: str, kind: str) -> None:
    outcome = _create(proxy, kind, "mock-text")
    assert outcome.error is None, outcome.error
    assert output_text(outcome.response["output"]) == "Answer: 4"
    (call,) = outcome.calls
    assert call.http_status == 200 and call.input_tokens > 0 and call.output_tokens > 0
    # seed is documented for chat completions only; sampling_json says what went out
    assert ("seed" in call.sampling) == (kind == "chat_completions")
    if kind == "chat_completions":
        assert orjson.loads(call.response)["received"]["object"] == "chat.completion"


@pytest.mark.parametrize(("kind", "model"), [("chat_completions", "mock-tools"),
                                             ("responses", "bridged-tools")])  # fmt: skip
def test_tool_calls(proxy: str, kind: str, model: str) -> None:
    outcome = _create(proxy, kind, model, tools=True)
    assert outcome.error is None, outcome.error
    (call,) = function_calls(outcome.response["output"])
    assert (call["call_id"], call["name"]) == ("call_1", "add")
    assert orjson.loads(call["arguments"]) == {"a": 2, "b": 2}


FAILURES = [
    ("chat_completions", "mock-429", "rate_limited", 429),
    ("chat_completions", "mock-500", "server_error", 500),
    ("chat_completions", "mock-context", "context_length_exceeded", 400),
    ("responses", "up-429", "rate_limited", 429),
    ("responses", "up-500", "server_error", 500),
    ("responses", "up-context", "context_length_exceeded", 400),
    ("responses", "up-401", "client_error", 401),  # the upstream refused LiteLLM's key
]


@pytest.mark.parametrize(("kind", "model", "failure_kind", "http_status"), FAILURES)
def test_errors_map_to_their_failure_kinds(
    proxy: str, kind: str, model: str, failure_kind: str, http_status: int
) -> None:
    outcome = _create(proxy, kind, model)
    (call,) = outcome.calls
    assert (call.failure_kind, call.http_status) == (failure_kind, http_status), call.error
    assert outcome.response is None and call.response  # LiteLLM's error body, as evidence


@pytest.mark.parametrize("kind", KINDS)
def test_no_key_is_a_401_client_error(proxy: str, kind: str) -> None:
    (call,) = _create(proxy, kind, "mock-text", keyed=False).calls
    assert (call.failure_kind, call.http_status) == ("client_error", 401)


def test_a_chat_refusal_is_refused_with_litellms_answer_kept(proxy: str) -> None:
    outcome = _create(proxy, "chat_completions", "mock-refusal")
    (call,) = outcome.calls
    assert call.failure_kind == "refused" and outcome.response is None
    received = orjson.loads(call.response)["received"]
    assert received["choices"][0]["message"]["content"] is None
    assert received["choices"][0]["message"]["provider_specific_fields"]["refusal"]


def test_a_refusal_lost_by_the_responses_bridge_is_not_scored(proxy: str) -> None:
    """LiteLLM's bridge turns the same refusal into a completed response with no output."""
    outcome = _create(proxy, "responses", "bridged-refusal")
    (call,) = outcome.calls
    assert call.failure_kind == "response_not_run" and outcome.response is None
    assert orjson.loads(call.response)["output"] == []


@pytest.mark.parametrize(("kind", "model"), [("chat_completions", "mock-filtered"),
                                             ("responses", "bridged-filtered")])  # fmt: skip
def test_an_answer_cut_by_a_content_filter_is_refused_not_scored(
    proxy: str, kind: str, model: str
) -> None:
    """The partial text before a content filter stopped the generation was scored as an answer."""
    outcome = _create(proxy, kind, model)
    (call,) = outcome.calls
    assert outcome.response is None, outcome.response
    assert call.failure_kind == "refused", (call.failure_kind, call.response)
    assert "Step 1: mix the" in call.response  # what LiteLLM answered, kept as evidence


def test_gym_eval_run_through_litellm_stores_refusals_as_failures(
    proxy: str, tmp_path: Path, prefect_api: str
) -> None:
    """As a user runs it: a refusing model behind LiteLLM's chat path is `refused`, not 0."""
    config = tmp_path / "eval.yaml"
    spec = {
        "benchmark": "arithmetic-smoke",
        "limit": 3,
        "repeats": 2,
        "model": {"kind": "chat_completions", "base_url": proxy, "name": "mock-refusal",
                  "api_key_env": KEY_ENV, "max_retries": 0},
        "out": str(tmp_path / "run"),
    }  # fmt: skip
    config.write_text(yaml.safe_dump(spec))
    env = {KEY_ENV: MASTER_KEY, "PREFECT_API_URL": prefect_api}
    result = gym("eval", "run", str(config), cwd=tmp_path, env=env)
    assert MASTER_KEY not in result.stdout + result.stderr
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        rollouts = con.execute("SELECT status, failure_kind, count(*) FROM rollouts GROUP BY ALL")
        assert rollouts.fetchall() == [("failed", "refused", 6)]
        assert con.execute("SELECT count(*) FROM verifications").fetchone() == (0,)
        evidence = con.execute(
            "SELECT DISTINCT response_json::JSON->'received'->'choices'->0->'message'"
            "->'provider_specific_fields'->>'refusal' FROM model_calls"
        ).fetchall()
        assert evidence == [("I can't help with that.",)]
    finally:
        con.close()
