"""API fidelity: the official `openai` SDK, unchanged, against `gym serve model`."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

from gymflow.environments.base import Environment
from tests.conftest import gym
from tests.models.conftest import ledger_prompts


def _sdk(base: str) -> OpenAI:
    return OpenAI(base_url=f"{base}/v1", api_key="not-a-real-key", max_retries=0)


def _play(client: OpenAI, prompt: str, tools: list[dict], **options):
    """Run the ledger conversation through the SDK until the model answers in text."""
    conversation: list = [{"role": "user", "content": prompt}]
    for _ in range(8):
        response = client.responses.create(
            model="any", input=conversation, tools=tools, extra_body={"seed": 3}, **options
        )
        assert response.status == "completed"
        # The SDK's own output objects go back as input, the way its documentation shows.
        conversation.extend(response.output)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response, conversation
        conversation.extend(
            {"type": "function_call_output", "call_id": c.call_id, "output": '{"balance": 0}'}
            for c in calls
        )
    raise AssertionError("the conversation never ended")


@pytest.mark.parametrize("reasoning", [None, {"effort": "low"}])
def test_responses_create_with_tools(served_model: str, ledger: Environment, reasoning) -> None:
    tools = ledger.resources_server().tools()
    prompt = ledger_prompts(ledger)[2]
    options = {"reasoning": reasoning} if reasoning else {}
    response, conversation = _play(_sdk(served_model), prompt, tools, **options)
    assert response.output_text.splitlines()[-1].startswith("Answer: ")
    assert response.model == "gymflow-simulated-policy"
    assert response.usage.input_tokens > 0 and response.usage.total_tokens > 0
    calls = [i for i in conversation if getattr(i, "type", None) == "function_call"]
    assert calls and {c.name for c in calls} <= {"deposit", "balance"}
    assert all(isinstance(c.arguments, str) for c in calls)
    kinds = {getattr(i, "type", None) for i in conversation}
    assert ("reasoning" in kinds) == bool(reasoning)
    if reasoning:
        assert response.usage.output_tokens_details.reasoning_tokens > 0


def test_text_answer_for_an_unknown_prompt(served_model: str) -> None:
    response = _sdk(served_model).responses.create(model="any", input="What is 2 + 2?")
    assert response.output_text == "I am a simulated policy and do not know this task."
    assert response.output[0].type == "message" and response.output[0].role == "assistant"


def test_chat_completions_with_tools(served_model: str, ledger: Environment) -> None:
    tools = [
        {"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")}}
        for t in ledger.resources_server().tools()
    ]
    completion = _sdk(served_model).chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": ledger_prompts(ledger)[2]}],
        tools=tools,
        seed=3,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "deposit"


def test_sdk_sees_injected_faults_as_its_own_errors(served_model: str) -> None:
    httpx.post(
        f"{served_model}/_gymflow/faults", json={"schedule": ["429", "context_length"]}
    ).raise_for_status()
    client = _sdk(served_model)
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="any", input="hi")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="any", input="hi")
    assert caught.value.code == "context_length_exceeded"


def test_serve_model_rejects_an_unknown_fault(tmp_path) -> None:
    result = gym("serve", "model", "--port", "1", "--fault", "gremlins=0.5", cwd=tmp_path)
    assert result.returncode == 1
    assert "rate_gremlins" in result.stderr and "context_length" in result.stderr
