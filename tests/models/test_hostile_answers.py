"""Answers a server should not send: wrong types, responses that never ran, and bodies far over
the bound. Each is its own failure kind, keeps the body as evidence, and is retried only when a
retry can help."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import orjson
import pytest
from aiohttp import web

from gymflow.core.config import HarnessConfig, ModelConfig, Sampling
from gymflow.environments.registry import load_environment
from gymflow.harness import get_harness
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import user_message
from gymflow.models.transport import EVIDENCE_HEAD_BYTES
from tests.models.conftest import responses_endpoint

CHAT = "/v1/chat/completions"


def _message(content: Any) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": content}


def _response(*output: Any, **extra: Any) -> dict[str, Any]:
    usage = {"input_tokens": 3, "output_tokens": 2}
    return {"id": "resp_1", "model": "m", "status": "completed", "output": list(output)} | {
        "usage": usage,
        **extra,
    }


def _completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
    return {"id": "c1", "model": "m", "choices": [choice], **extra}


def _serving(bodies: list[bytes], headers: dict[str, str] | None = None):
    """A handler answering each request with the next body (the last one repeats)."""
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.json())
        body = bodies[min(len(seen), len(bodies)) - 1]
        return web.Response(body=body, content_type="application/json", headers=headers)

    handler.seen = seen  # type: ignore[attr-defined]
    return handler


def _call(handler, *, kind: str = "responses", **model: Any) -> CallOutcome:
    async def go() -> CallOutcome:
        path = CHAT if kind == "chat_completions" else "/v1/responses"
        async with responses_endpoint(handler, path) as base_url:
            config = ModelConfig.model_validate(
                {"kind": kind, "base_url": base_url, "backoff_s": 0.0, **model}
            )
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=1)

    return asyncio.run(go())


WRONG_TYPES = {
    "text is a number": _response(_message([{"type": "output_text", "text": 42}])),
    "content is a number": _response(_message(42)),
    "content parts are strings": _response(_message(["Answer: 4"])),
    "arguments are an object": _response(
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"x": 1}}
    ),
    "call without a name": _response({"type": "function_call", "call_id": "c", "arguments": ""}),
    "an item is a string": _response("message"),
    "tokens as text": _response(_message("4"), usage={"input_tokens": "3", "output_tokens": 2}),
    "negative tokens": _response(_message("4"), usage={"input_tokens": -3, "output_tokens": 2}),
    "unknown status": _response(_message("4"), status="done"),
    "output is an object": _response() | {"output": {"type": "message"}},
    "a list, not an object": [_response(_message("4"))],
}


@pytest.mark.parametrize("name", WRONG_TYPES)
def test_wrong_types_are_malformed_retried_and_kept(name: str) -> None:
    body = orjson.dumps(WRONG_TYPES[name])
    outcome = _call(_serving([body]), max_retries=2)
    assert outcome.error is not None and outcome.error.kind == "malformed_response"
    assert [c.failure_kind for c in outcome.calls] == ["malformed_response"] * 3
    assert all(c.response == body.decode() and c.http_status == 200 for c in outcome.calls)
    assert outcome.calls[0].error.startswith("not a Responses API object")


def test_a_retry_after_a_malformed_answer_can_succeed() -> None:
    good = orjson.dumps(_response(_message([{"type": "output_text", "text": "4"}])))
    bad = orjson.dumps(WRONG_TYPES["text is a number"])
    outcome = _call(_serving([bad, good]), max_retries=2)
    assert outcome.error is None
    assert [c.failure_kind for c in outcome.calls] == ["malformed_response", None]


def test_unknown_item_and_part_types_are_kept_as_they_came() -> None:
    answer = _response(
        {"type": "web_search_call", "id": "ws", "status": "completed"},
        _message([{"type": "output_audio", "data": "..."}, {"type": "output_text", "text": "4"}]),
    )
    outcome = _call(_serving([orjson.dumps(answer)]))
    assert outcome.error is None
    assert outcome.response["output"] == answer["output"]


CHAT_WRONG_TYPES = {
    "content is a number": _completion({"content": 42}),
    "no choices": _completion({"content": "4"}) | {"choices": []},
    "tool calls as a string": _completion({"content": None, "tool_calls": "f(1)"}),
    "function name a number": _completion(
        {"tool_calls": [{"id": "c", "function": {"name": 7, "arguments": "{}"}}]}
    ),
    "prompt tokens as text": _completion({"content": "4"}, usage={"prompt_tokens": "9"}),
}


@pytest.mark.parametrize("name", CHAT_WRONG_TYPES)
def test_chat_answers_are_validated_before_translation(name: str) -> None:
    body = orjson.dumps(CHAT_WRONG_TYPES[name])
    outcome = _call(_serving([body]), kind="chat_completions", max_retries=1)
    assert [c.failure_kind for c in outcome.calls] == ["malformed_response"] * 2
    assert all(c.response == body.decode() for c in outcome.calls)
    assert outcome.calls[0].error.startswith("not a chat completion")


NOT_RUN = {
    "queued": _response(status="queued"),
    "in_progress": _response(status="in_progress"),
    "cancelled": _response(status="cancelled"),
    "output null": _response() | {"output": None},
    "no output key": {"id": "resp_1", "model": "m", "status": "completed"},
    "empty output": _response(),
    "only reasoning": _response({"type": "reasoning", "id": "rs_1", "summary": []}),
}


@pytest.mark.parametrize("name", NOT_RUN)
def test_a_response_that_did_not_run_is_its_own_failure(name: str) -> None:
    body = orjson.dumps(NOT_RUN[name])
    outcome = _call(_serving([body]), max_retries=1)
    assert [c.failure_kind for c in outcome.calls] == ["response_not_run"] * 2
    assert outcome.response is None and outcome.calls[0].response == body.decode()


def test_a_chat_answer_of_only_reasoning_did_not_run_to_an_answer() -> None:
    """`content: null` beside `reasoning_content`: the model thought and never answered."""
    body = orjson.dumps(_completion({"content": None, "reasoning_content": "Let me think"}))
    outcome = _call(_serving([body]), kind="chat_completions", max_retries=0)
    (call,) = outcome.calls
    assert call.failure_kind == "response_not_run" and outcome.response is None
    assert "holds only reasoning" in call.error


def test_a_rollout_over_a_malformed_answer_fails_with_its_kind_and_evidence() -> None:
    """Through the single-turn harness, as the collector runs it: no harness_error, no score."""
    body = orjson.dumps(WRONG_TYPES["content parts are strings"])
    env = load_environment("arithmetic")
    task = next(iter(env.tasks()))
    server = env.resources_server()

    async def go():
        async with responses_endpoint(_serving([body])) as base_url:
            config = ModelConfig(kind="responses", base_url=base_url, max_retries=1, backoff_s=0)
            async with ResponsesClient(config, base_url, Sampling()) as client:
                session = await server.seed_session(task)
                return await get_harness("single_turn")(
                    client=client,
                    server=server,
                    session_id=session,
                    task=task,
                    prompt="What is 2 + 2?",
                    seed=0,
                    config=HarnessConfig(),
                )

    episode = asyncio.run(go())
    assert episode.failure_kind == "malformed_response"
    assert [c.response for c in episode.calls] == [body.decode()] * 2


# -- size ------------------------------------------------------------------------------------------
BOUND = 64 * 1024
BIG = orjson.dumps(_response(_message([{"type": "output_text", "text": "x" * (4 * BOUND)}])))


async def _streamed(request: web.Request) -> web.StreamResponse:
    """No Content-Length: chunked, so only counting what is read can stop it."""
    await request.read()
    reply = web.StreamResponse(headers={"content-type": "application/json"})
    reply.enable_chunked_encoding()
    await reply.prepare(request)
    try:
        for start in range(0, len(BIG), 8192):
            await reply.write(BIG[start : start + 8192])
    except (ConnectionError, RuntimeError):
        pass  # the client stopped reading, as it should
    return reply


async def _gzip_bomb(request: web.Request) -> web.Response:
    await request.read()
    body = gzip.compress(b'{"id": "' + b"0" * (200 * BOUND) + b'"}')
    assert len(body) < BOUND  # small on the wire, 200 times the bound once inflated
    return web.Response(
        body=body, headers={"content-type": "application/json", "content-encoding": "gzip"}
    )


@pytest.mark.parametrize(
    "handler",
    [_serving([BIG]), _streamed, _gzip_bomb],
    ids=["content-length", "chunked", "gzip-bomb"],
)
def test_an_answer_over_the_bound_is_too_large_and_not_retried(handler) -> None:
    outcome = _call(handler, max_retries=3, max_response_bytes=BOUND)
    (call,) = outcome.calls
    assert call.failure_kind == "response_too_large" and call.http_status == 200
    assert "model.max_response_bytes" in call.error
    assert len(call.response or "") <= EVIDENCE_HEAD_BYTES


def test_an_answer_within_the_bound_is_read_whole() -> None:
    outcome = _call(_streamed, max_response_bytes=len(BIG))
    assert outcome.error is None
    assert outcome.calls[0].response == BIG.decode()


def test_the_bound_is_a_model_setting_with_a_floor() -> None:
    assert ModelConfig().max_response_bytes == 8 << 20
    with pytest.raises(ValueError, match="max_response_bytes"):
        ModelConfig(max_response_bytes=10)


def test_evidence_is_the_answer_as_received() -> None:
    """A Responses answer is stored as the server wrote it, not as gymflow re-encoded it."""
    answer = json.dumps(_response(_message("4")), indent=2).encode()
    outcome = _call(_serving([answer]))
    assert outcome.error is None and outcome.calls[0].response == answer.decode()
