"""The recording proxy against the official `openai` SDK (chat completions and Responses, streamed
and not) with `gym serve model` as the upstream, in both upstream kinds; and the calls it refuses,
those after the deadline and an answer without usage, recorded as such."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web
from openai import AsyncOpenAI

from gymflow.core.config import ModelConfig, Sampling
from gymflow.core.records import ModelCall
from gymflow.environments.base import Environment
from gymflow.harness.proxy import AFTER_DEADLINE, PROXY_REFUSED, RecordingProxy
from gymflow.models.client import ResponsesClient
from tests.models import conftest as models
from tests.models.conftest import ledger_prompts, responses_endpoint

# `gym serve model --environment ledger`, and the ledger environment, as tests/models uses them.
served_model = models.served_model
ledger = models.ledger

#: The run's sampling: what every forwarded call must carry, whatever the agent asked for.
SAMPLING = Sampling(temperature=0.25, top_p=0.5, max_output_tokens=321)


def _run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, timeout=60))


async def _through_proxy(
    upstream: str, kind: str, agent, *, seed: int | None = 7, deadline_s: float | None = None
) -> tuple[Any, list[ModelCall]]:
    """`agent(sdk, proxy)` against a proxy in front of `upstream`; (its result, the calls)."""
    config = ModelConfig(kind=kind, base_url=upstream, name="the-run-model", max_retries=0)
    client = ResponsesClient(config, upstream, SAMPLING)
    async with client, RecordingProxy(client, seed=seed, deadline_s=deadline_s) as proxy:
        assert proxy.base_url.startswith("http://127.0.0.1:")
        sdk = AsyncOpenAI(base_url=proxy.base_url, api_key=proxy.api_key, max_retries=0)
        result = await agent(sdk, proxy)
        await sdk.close()
    return result, proxy.calls


def _forwarded(call: ModelCall, *, seed_in_body: bool) -> None:
    """A forwarded call: gymflow's model name and sampling, not the agent's, and usage kept."""
    assert call.status == "completed" and call.failure_kind is None and call.http_status == 200
    assert call.request["model"] == "the-run-model"
    assert call.sampling["temperature"] == 0.25 and call.sampling["top_p"] == 0.5
    assert call.sampling["max_output_tokens"] == 321
    assert ("seed" in call.sampling) == seed_in_body
    assert call.input_tokens and call.output_tokens and call.latency_s is not None
    assert call.response is not None


UPSTREAM_KINDS = ["responses", "chat_completions"]


@pytest.mark.parametrize("kind", UPSTREAM_KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_responses_api_through_the_proxy(
    served_model: str, ledger: Environment, kind: str, stream: bool
) -> None:
    tools = ledger.resources_server().tools()
    prompt = ledger_prompts(ledger)[2]

    async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
        options = dict(model="gpt-agent", input=prompt, tools=tools, temperature=1.9)
        options["instructions"] = "You are an agent."
        if not stream:
            return await sdk.responses.create(**options)
        events = []
        async with sdk.responses.stream(**options) as running:
            async for event in running:
                events.append(event.type)
            final = await running.get_final_response()
        assert events[0] == "response.created" and events[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in events
        return final

    response, calls = _run(_through_proxy(f"{served_model}/v1", kind, agent))
    assert response.status == "completed"
    made = [item for item in response.output if item.type == "function_call"]
    assert made and made[0].name in {"deposit", "balance"} and made[0].arguments.startswith("{")
    assert [call.call_index for call in calls] == [0]
    _forwarded(calls[0], seed_in_body=kind == "chat_completions")
    first = calls[0].request["input"][0]
    assert first == {"type": "message", "role": "system", "content": "You are an agent."}
    assert calls[0].request["tools"] == tools


@pytest.mark.parametrize("kind", UPSTREAM_KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_through_the_proxy(
    served_model: str, ledger: Environment, kind: str, stream: bool
) -> None:
    tools = [
        {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        for tool in ledger.resources_server().tools()
    ]
    prompt = ledger_prompts(ledger)[2]

    async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
        messages = [{"role": "user", "content": prompt}]
        options = dict(model="gpt-agent", messages=messages, tools=tools, max_tokens=5)
        if not stream:
            return (await sdk.chat.completions.create(**options)).choices[0].message.tool_calls
        chunks = [
            chunk
            async for chunk in await sdk.chat.completions.create(
                **options, stream=True, stream_options={"include_usage": True}
            )
        ]
        calls = [c for chunk in chunks for ch in chunk.choices for c in ch.delta.tool_calls or ()]
        assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0
        return calls

    made, calls = _run(_through_proxy(f"{served_model}/v1", kind, agent))
    assert made and made[0].function.name in {"deposit", "balance"}
    assert made[0].function.arguments.startswith("{") and made[0].id
    assert len(calls) == 1
    _forwarded(calls[0], seed_in_body=kind == "chat_completions")


def test_a_whole_conversation_is_recorded_call_by_call(
    served_model: str, ledger: Environment
) -> None:
    """The ledger conversation played by the SDK through the proxy: every turn one call, in
    order, and the last answer is the text the last recorded call produced."""
    tools = ledger.resources_server().tools()
    prompt = ledger_prompts(ledger)[2]

    async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
        conversation: list = [{"role": "user", "content": prompt}]
        for _ in range(8):
            response = await sdk.responses.create(model="m", input=conversation, tools=tools)
            conversation.extend(response.output)
            made = [item for item in response.output if item.type == "function_call"]
            if not made:
                return response
            conversation.extend(
                {"type": "function_call_output", "call_id": c.call_id, "output": '{"balance": 0}'}
                for c in made
            )
        raise AssertionError("the conversation never ended")

    response, calls = _run(_through_proxy(f"{served_model}/v1", "responses", agent))
    assert [call.call_index for call in calls] == list(range(len(calls))) and len(calls) > 1
    recorded = json.loads(calls[-1].response)["output"][-1]["content"][0]["text"]
    assert response.output_text and response.output_text == recorded


def test_calls_the_proxy_refuses_are_recorded(served_model: str) -> None:
    async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
        outcomes = []
        async with httpx.AsyncClient() as http:
            for headers, content in [
                ({}, b'{"model": "m", "input": "hi"}'),  # no key
                ({"authorization": f"Bearer {proxy.api_key}"}, b"{not json"),
                ({"authorization": f"Bearer {proxy.api_key}"}, b'{"model": "m"}'),  # no input
            ]:
                reply = await http.post(
                    f"{proxy.base_url}/responses", content=content, headers=headers
                )
                outcomes.append((reply.status_code, reply.json()["error"]["code"]))
        return outcomes

    outcomes, calls = _run(_through_proxy(f"{served_model}/v1", "responses", agent))
    assert outcomes == [(401, PROXY_REFUSED), (400, PROXY_REFUSED), (400, PROXY_REFUSED)]
    assert [(c.call_index, c.status, c.failure_kind) for c in calls] == [
        (i, "error", PROXY_REFUSED) for i in range(3)
    ]
    assert calls[2].request == {"model": "m"} and "no input" in calls[2].error


def test_calls_after_the_deadline_are_refused_and_recorded(served_model: str) -> None:
    async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
        first = await sdk.responses.create(model="m", input="What is 2 + 2?")
        proxy.deadline_s = 0.0  # the agent's time is up (no wall-clock race on a loaded machine)
        with pytest.raises(openai.APIStatusError) as late:
            await sdk.responses.create(model="m", input="What is 2 + 2?")
        return first, late.value.status_code

    (first, status), calls = _run(
        _through_proxy(f"{served_model}/v1", "responses", agent, deadline_s=600.0)
    )
    assert first.output_text and status == 408
    assert [c.failure_kind for c in calls] == [None, AFTER_DEADLINE]
    assert calls[1].http_status == 408 and calls[1].status == "error"


def test_an_upstream_failure_reaches_the_agent_as_its_kind(served_model: str) -> None:
    """A context-length error upstream stays a 400 naming context_length_exceeded, recorded
    with that kind; the proxy's failure_kind() says what ended the agent."""

    async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
        async with httpx.AsyncClient() as http:
            faults = {"schedule": ["context_length"]}
            await http.post(f"{served_model}/_gymflow/faults", json=faults)
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.responses.create(model="m", input="hi", stream=True)
        return refused.value.body, proxy.failure_kind()

    (body, kind), calls = _run(_through_proxy(f"{served_model}/v1", "responses", agent))
    assert body["code"] == "context_length_exceeded" and kind == "context_length_exceeded"
    assert calls[0].failure_kind == "context_length_exceeded" and calls[0].http_status == 400


def test_an_answer_without_usage_is_passed_on_and_recorded_without_counts() -> None:
    async def no_usage(request: web.Request) -> web.Response:
        completion = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "upstream",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}
            ],
        }  # fmt: skip
        return web.json_response(completion)

    async def scenario():
        async with responses_endpoint(no_usage, "/v1/chat/completions") as upstream:

            async def agent(sdk: AsyncOpenAI, proxy: RecordingProxy):
                messages = [{"role": "user", "content": "hi"}]
                chunks = [
                    chunk
                    async for chunk in await sdk.chat.completions.create(
                        model="m", messages=messages, stream=True
                    )
                ]
                return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

            return await _through_proxy(upstream, "chat_completions", agent)

    text, calls = _run(scenario())
    assert text == "ok"
    assert calls[0].status == "completed"
    assert calls[0].input_tokens is None and calls[0].output_tokens is None
