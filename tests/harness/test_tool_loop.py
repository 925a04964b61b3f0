"""tool_loop: scripted models for the edge cases, the local policy server over HTTP end to end."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import pytest

from gymflow.core.config import HarnessConfig, ModelConfig, Sampling
from gymflow.core.prompts import render_prompt
from gymflow.core.protocols import ToolServerError
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment
from gymflow.environments.resources import ResourcesServer
from gymflow.harness import get_harness
from gymflow.harness.tool_loop import MAX_CONCURRENT_TOOL_CALLS
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import RESPONSE, function_tool
from gymflow.simulated.local_server import LocalPolicyServer
from gymflow.simulated.policy import PolicyEntry, build_table, prompt_key
from tests.models.conftest import play_ledger


def _call(name: str, arguments: Any, call_id: str) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": raw}


def _text(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


class ScriptedClient:
    """Answers each model call with the next scripted output; keeps what it was sent."""

    def __init__(self, turns: list[list[dict[str, Any]]], status: str = "completed") -> None:
        self.turns = list(turns)
        self.status = status
        self.requests: list[list[dict[str, Any]]] = []

    async def create(self, items, *, tools, call_index, seed) -> CallOutcome:
        self.requests.append(json.loads(json.dumps(items)))
        output = self.turns.pop(0) if self.turns else [_text("out of script")]
        status = self.status if not self.turns else "completed"
        raw = {"id": f"r{call_index}", "model": "scripted", "status": status, "output": output}
        return CallOutcome(RESPONSE.validate_python(raw))


async def _play(env: Environment, client, *, max_turns: int = 8, server=None):
    task = env.tasks()[0]
    server = server or env.resources_server()
    session = await server.seed_session(task)
    episode = await get_harness("tool_loop")(
        client=client,
        server=server,
        session_id=session,
        task=task,
        prompt="play",
        seed=1,
        config=HarnessConfig(max_turns=max_turns),
    )
    return episode, server.final_state(session)


def test_reference_plan_three_turns(ledger: Environment) -> None:
    client = ScriptedClient(
        [
            [_call("deposit", {"amount": 3}, "a"), _call("deposit", {"amount": 10}, "b")],
            [_call("balance", {}, "c")],
            [_text("Answer: 13")],
        ]
    )
    episode, state = asyncio.run(_play(ledger, client))
    assert state == {"balance": 13}
    assert (episode.num_turns, episode.output_text, episode.failure_kind) == (3, "Answer: 13", None)
    assert episode.counters["tool_calls"] == 3
    assert episode.counters["parallel_turns"] == 1
    assert episode.counters["max_turns_reached"] == 0
    # Each output answers its own call, and the second request already carries both.
    second = client.requests[1]
    outputs = {i["call_id"]: json.loads(i["output"]) for i in second if "output" in i}
    assert outputs == {"a": {"balance": 3}, "b": {"balance": 13}}
    assert [i["type"] for i in episode.trajectory][-2:] == ["function_call_output", "message"]


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ('{"amount": 3', "not valid JSON"),
        ("[3]", "must be a JSON object"),
        ({"amount": "three"}, "amount: 'three' is not of type 'integer'"),
        ({}, "'amount' is a required property"),
    ],
)
def test_malformed_arguments_go_back_to_the_model(ledger: Environment, arguments, told) -> None:
    client = ScriptedClient([[_call("deposit", arguments, "x")], [_text("Answer: 0")]])
    episode, state = asyncio.run(_play(ledger, client))
    assert state == {"balance": 0}  # the tool never ran
    assert episode.counters["malformed_tool_calls"] == 1
    assert episode.counters["tool_errors"] == 1
    (feedback,) = [i for i in client.requests[1] if i["type"] == "function_call_output"]
    assert feedback["call_id"] == "x"
    assert feedback["output"].startswith("error: malformed arguments for deposit")
    assert told in feedback["output"]
    assert episode.failure_kind is None


def test_tool_errors_and_unknown_tools_are_told_not_failed(ledger: Environment) -> None:
    client = ScriptedClient(
        [
            [_call("deposit", {"amount": -4}, "neg"), _call("withdraw", {"amount": 1}, "nope")],
            [_text("Answer: 0")],
        ]
    )
    episode, _ = asyncio.run(_play(ledger, client))
    outputs = {i["call_id"]: i["output"] for i in client.requests[1] if "output" in i}
    assert outputs["neg"] == "error: amount must be positive, got -4"
    assert outputs["nope"] == "error: unknown tool 'withdraw' (tools: balance, deposit)"
    assert episode.counters["tool_errors"] == 2
    assert episode.counters["unknown_tool_calls"] == 1
    assert episode.counters["malformed_tool_calls"] == 0


def test_max_turns_is_an_outcome_not_a_failure(ledger: Environment) -> None:
    client = ScriptedClient([[_call("balance", {}, f"c{i}")] for i in range(5)])
    episode, _ = asyncio.run(_play(ledger, client, max_turns=3))
    assert episode.num_turns == 3 and len(client.requests) == 3
    assert episode.counters["max_turns_reached"] == 1
    assert episode.failure_kind is None


def test_incomplete_response_stops_the_loop(ledger: Environment) -> None:
    client = ScriptedClient([[_text("The bal")]], status="incomplete")
    episode, _ = asyncio.run(_play(ledger, client))
    assert (episode.incomplete, episode.num_turns, episode.output_text) == (True, 1, "The bal")


class _Rendezvous(ResourcesServer):
    """Two calls that each wait for the other: only concurrent execution lets both finish."""

    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {
        "meet": function_tool("meet", "wait for the other caller", {"type": "object"}),
        "crash": function_tool("crash", "a buggy tool", {"type": "object"}),
    }

    def handlers(self):
        return {"meet": self._meet, "crash": self._crash}

    def initial_state(self, task: Task) -> dict[str, Any]:
        return {"arrived": 0}

    async def _meet(self, state, arguments):
        state["arrived"] += 1
        if state["arrived"] == 2:
            self.both.set()
        try:
            await asyncio.wait_for(self.both.wait(), timeout=30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return "met"

    def _crash(self, state, arguments):
        raise KeyError("bug")


def test_parallel_calls_run_concurrently_and_a_crash_is_a_tool_error(ledger) -> None:
    async def scenario():
        server = _Rendezvous(ledger)
        server.both = asyncio.Event()
        client = ScriptedClient(
            [[_call("meet", {}, "m1"), _call("meet", {}, "m2")], [_call("crash", {}, "k")]]
        )
        return await _play(ledger, client, server=server)

    episode, state = asyncio.run(scenario())
    assert state == {"arrived": 2}
    assert episode.failure_kind == "tool_error"
    assert "tool 'crash' crashed: KeyError" in episode.error


def test_a_crash_cancels_the_other_calls_of_its_turn(ledger) -> None:
    async def scenario():
        server = _Rendezvous(ledger)
        server.both = asyncio.Event()
        client = ScriptedClient([[_call("meet", {}, "m"), _call("crash", {}, "k")]])
        return await _play(ledger, client, server=server)

    episode, state = asyncio.run(scenario())
    assert episode.failure_kind == "tool_error"
    assert state == {"arrived": 1, "cancelled": True}


class _FailingServer(ResourcesServer):
    """A tool whose server fails as a NeMo Gym route answering 500 does."""

    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {
        "lookup": function_tool("lookup", "look a key up", {"type": "object"}),
    }

    def handlers(self):
        return {"lookup": self._lookup}

    def _lookup(self, state, arguments):
        raise ToolServerError(
            "tool route /lookup answered 500: KeyError('gone')\nthe server's log ends:\nboom",
            output="KeyError('gone')",
        )


def test_a_tool_server_error_is_read_by_the_model_and_kept(ledger) -> None:
    """NeMo Gym's agent hands a 500's body to the model and goes on: the rollout goes on to its
    answer, the model reads the body as it came, and the failure is the episode's evidence."""
    client = ScriptedClient([[_call("lookup", {}, "k")], [_text("Answer: unknown")]])
    episode, _ = asyncio.run(_play(ledger, client, server=_FailingServer(ledger)))
    assert (episode.failure_kind, episode.output_text) == (None, "Answer: unknown")
    (told,) = [i for i in client.requests[1] if i.get("type") == "function_call_output"]
    assert told["output"] == "KeyError('gone')"
    assert (episode.counters["tool_errors"], episode.counters["tool_server_errors"]) == (1, 1)
    (failure,) = episode.tool_failures
    assert failure.startswith("tool route /lookup answered 500") and "boom" in failure


class _Crowd(ResourcesServer):
    """One tool that records how many of its calls are in flight at once."""

    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {
        "tick": function_tool("tick", "count a call", {"type": "object"}),
    }

    def handlers(self):
        return {"tick": self._tick}

    def initial_state(self, task: Task) -> dict[str, Any]:
        return {"in_flight": 0, "most": 0, "done": 0}

    async def _tick(self, state, arguments):
        state["in_flight"] += 1
        state["most"] = max(state["most"], state["in_flight"])
        await asyncio.sleep(0.001)
        state["in_flight"] -= 1
        state["done"] += 1
        return str(state["done"])


def test_a_turn_of_many_calls_runs_them_a_bounded_number_at_a_time(ledger) -> None:
    """A reply can carry thousands of calls: they all run and are answered in order, but never
    more than MAX_CONCURRENT_TOOL_CALLS at once against the resources server."""
    many = [_call("tick", {}, f"t{i}") for i in range(5 * MAX_CONCURRENT_TOOL_CALLS)]
    client = ScriptedClient([many, [_text("done")]])
    episode, state = asyncio.run(_play(ledger, client, server=_Crowd(ledger)))
    assert episode.failure_kind is None and state["done"] == len(many)
    assert 1 < state["most"] <= MAX_CONCURRENT_TOOL_CALLS
    answered = [i["call_id"] for i in client.requests[1] if i.get("type") == "function_call_output"]
    assert answered == [c["call_id"] for c in many]


def test_local_policy_plays_the_ledger_over_http(ledger: Environment) -> None:
    """Every task through the real policy server: right plans pass in 3 turns, wrong ones fail,
    and a plan carrying raw argument text is a malformed call the model hears about."""
    tasks = ledger.tasks()
    prompts = [render_prompt(ledger.manifest.prompt_template, t.inputs) for t in tasks]
    table = build_table(tasks, prompts, skill_seed=0)
    broken = table[prompt_key(prompts[1])]
    table[prompt_key(prompts[1])] = PolicyEntry(
        broken.task_id,
        broken.reference,
        broken.distractor,
        [[{"name": "deposit", "arguments": '{"amount": 4'}], *broken.reference_actions],
        broken.distractor_actions,
        1.0,
    )

    with LocalPolicyServer(table, seed=0) as policy:
        played = play_ledger(ledger, policy.base_url, seed=7, concurrency=8, config=ModelConfig())
        results = [
            (task, *outcome) for task, outcome in zip(tasks, asyncio.run(played), strict=True)
        ]

    passed = [(t, e) for t, e, v in results if v.passed]
    assert passed and len(passed) < len(results)  # skill differs across tasks
    for _, episode in passed:
        assert episode.failure_kind is None
        assert episode.counters["tool_calls"] >= 3
    for task, episode, verdict in results:
        if task.task_id != tasks[1].task_id and verdict.passed:
            assert episode.num_turns == 3 + episode.counters["malformed_tool_calls"]
    _, malformed, verdict = results[1]
    assert malformed.counters["malformed_tool_calls"] == 1
    sent = malformed.calls[1].request["input"]
    feedback = next(i for i in sent if i["type"] == "function_call_output")
    assert feedback["call_id"] == "call_0_0" and "not valid JSON" in feedback["output"]


def test_reasoning_items_go_back_on_every_turn(ledger: Environment) -> None:
    """The policy server rejects a function call passed back without its reasoning item, as
    reasoning models do; the tool loop keeps them, so every turn is accepted."""
    tasks = ledger.tasks()
    prompts = [render_prompt(ledger.manifest.prompt_template, t.inputs) for t in tasks]
    sampling = Sampling(reasoning_effort="low")

    async def play(base_url: str):
        server = ledger.resources_server()
        session = await server.seed_session(tasks[4])
        async with ResponsesClient(ModelConfig(), base_url, sampling) as client:
            episode = await get_harness("tool_loop")(
                client=client,
                server=server,
                session_id=session,
                task=tasks[4],
                prompt=prompts[4],
                seed=2,
                config=HarnessConfig(),
            )
            stripped = [i for i in episode.trajectory if i["type"] != "reasoning"]
            forgetful = await client.create(stripped, tools=server.tools(), call_index=9, seed=2)
        return episode, forgetful

    with LocalPolicyServer(build_table(tasks, prompts, 0), seed=0) as policy:
        episode, forgetful = asyncio.run(play(policy.base_url))
    assert episode.failure_kind is None and episode.num_turns >= 2
    reasoning = [i for i in episode.trajectory if i["type"] == "reasoning"]
    assert len(reasoning) == episode.num_turns
    for index, call in enumerate(episode.calls[1:], start=1):
        sent = [i["id"] for i in call.request["input"] if i["type"] == "reasoning"]
        assert sent == [r["id"] for r in reasoning[:index]]
        assert call.reasoning_tokens > 0
    assert forgetful.error.kind == "client_error"
    assert "without its required 'reasoning' item" in forgetful.error.args[0]
