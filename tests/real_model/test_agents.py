"""A real model under real agents, end to end: SmolLM2-135M behind llama.cpp's server, reached
only through gymflow's recording proxy, under mini-swe-agent and Codex, on shipped workspace
tasks in the bubblewrap sandbox. The model solves nothing; what is tested is the chain: every
rollout ends judged or with a failure kind, and the model calls each agent's own log counts
equal the calls the proxy recorded. Codex's prompt (about 10,000 tokens) does not fit the
model's 2,048: that refusal is the rollout's failure kind, `context_length_exceeded`.

What llama-cpp-python 0.3.36's `chatml-function-calling` format does with a conversation, seen
here: a tool turn's output is not rendered (`<|im_start|>tool` and nothing after it), the prompt
is HTML-escaped (the model writes `&lt;` in its commands), and a call's arguments are generated
with no token limit. So SmolLM2 repeats its first command and never sees what it printed: its
turns after the second add nothing to what is tested, so mini-swe-agent's run stops at two
(`MAX_TURNS`)."""

from __future__ import annotations

import asyncio

import pytest

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.client import CallOutcome, ResponsesClient
from tests.harness.test_agents import outcomes, run_agent
from tests.real_model.conftest import CALL_TIMEOUT_S, MODEL

pytestmark = pytest.mark.slow

#: Failure kinds a small model may leave an agent in; any other is a defect of the chain
#: (a server_error was one: see test_a_tool_turn_is_a_request_llama_cpp_takes).
AGENT_OUTCOMES = {None, "agent_step_limit", "agent_timeout", "context_length_exceeded"}
#: The agent's turns: its first command and its answer to that command's output, what is
#: asserted. Each is a 1,200-token prompt for SmolLM2's one-thread server; with eight the test
#: took 139 CPU s and, at load 13, a rollout's fourth call ran past the task's 300 s agent
#: timeout, so the agent's own log was one call short; with two, 88 CPU s.
MAX_TURNS = 2


def _run(agent: str, llama_server: str, tmp_path, prefect_api: str):
    model = {"kind": "chat_completions", "base_url": llama_server, "name": MODEL,
             "tool_choice": "auto", "max_retries": 0, "timeout_s": CALL_TIMEOUT_S}  # fmt: skip
    sampling = {"temperature": 0.0, "top_p": 1.0, "max_output_tokens": 96, "seed": 0}
    store = run_agent(agent, llama_server, tmp_path, prefect_api, limit=2, model=model,
                      sampling=sampling, max_turns=MAX_TURNS)  # fmt: skip
    return outcomes(store)


def test_smollm2_under_mini_swe_agent(llama_server: str, tmp_path, prefect_api: str) -> None:
    rows = _run("mini-swe-agent", llama_server, tmp_path, prefect_api)
    assert len(rows) == 2
    for task, status, kind, reward, recorded, logged in rows:
        assert kind in AGENT_OUTCOMES, (task, status, kind)
        assert (reward is not None) == (status == "completed"), (task, status, reward)
        # more than one turn: the model's second call answered its first command's output
        assert recorded >= 2 and recorded == logged, (task, recorded, logged)


LS = '{"command": "ls /app"}'


def test_a_tool_turn_is_a_request_llama_cpp_takes(llama_server: str) -> None:
    """An assistant turn of tool calls alone, then the call's output: the turn every agent's
    second request holds. Sent as `content: null` llama-cpp-python's server refused it with a
    500 (its schema types an assistant's content as a string); without content its chat
    format's template failed (another 500). gymflow's chat adapter sends empty text."""
    config = ModelConfig(kind="chat_completions", base_url=llama_server, name=MODEL,
                         tool_choice="auto", max_retries=0, timeout_s=CALL_TIMEOUT_S)  # fmt: skip
    bash = {"type": "function", "name": "bash", "description": "Run a bash command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                           "required": ["command"]}}  # fmt: skip
    items = [
        {"type": "message", "role": "user", "content": "List the files in /app."},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": LS},
        {"type": "function_call_output", "call_id": "call_1", "output": "orders.csv\n"},
    ]

    async def call() -> CallOutcome:
        sampling = Sampling(temperature=0.0, max_output_tokens=32)
        async with ResponsesClient(config, llama_server, sampling) as client:
            return await client.create(items, tools=[bash], call_index=0, seed=0)

    outcome = asyncio.run(call())
    (sent,) = outcome.calls
    assert (sent.status, sent.http_status, outcome.error) == ("completed", 200, None), sent.error


def test_smollm2_under_codex_is_a_context_refusal(
    llama_server: str, tmp_path, prefect_api: str
) -> None:
    rows = _run("codex", llama_server, tmp_path, prefect_api)
    assert len(rows) == 2
    for task, status, kind, reward, recorded, logged in rows:
        assert (status, kind, reward) == ("failed", "context_length_exceeded", None), task
        assert recorded == logged == 1, (task, recorded, logged)
