"""backoffice (the multi-turn, stateful workbench): tools, sessions, state_match, tasks, a run."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import duckdb
import pytest

from gymflow.builtin.backoffice import tools
from gymflow.builtin.backoffice.tasks import play
from gymflow.core.protocols import SESSION_TOKEN_HEADER, ToolError
from gymflow.core.tasks import Task, ToolCall
from gymflow.environments.asgi import create_app
from gymflow.environments.registry import load_environment
from gymflow.verifiers.base import VerifierError, VerifyInput, get_verifier
from tests.conftest import gym

ENV = load_environment("backoffice")
SPEC = get_verifier("state_match")
MANIFEST_PARAMS = SPEC.params(ENV.manifest.verifier.params)


def _shop() -> dict:
    return {
        "products": {
            "P-1": {"name": "Blue Mug", "price": 12.5, "stock": 3},
            "P-2": {"name": "Oak Board", "price": 34.0, "stock": 0},
        },
        "customers": {"C-1": {"name": "Ada Lovelace", "email": "ada@example.com"}},
        "orders": {
            "O-1": {
                "customer_id": "C-1",
                "items": [{"sku": "P-1", "quantity": 1}],
                "total": 12.5,
                "status": "shipped",
            },
        },
        "outbox": [],
        "next_order": 2,
    }


def test_tools_change_state_and_refuse_bad_input() -> None:
    s = _shop()
    assert tools.find_customer(s, {"name": "ada"})[0]["customer_id"] == "C-1"
    assert tools.find_customer(s, {"name": "Grace"}) == []
    assert [p["sku"] for p in tools.search_products(s, {"max_stock": 0})] == ["P-2"]
    assert [p["sku"] for p in tools.search_products(s, {"query": "mug"})] == ["P-1"]

    created = tools.create_order(
        s, {"customer_id": "C-1", "items": [{"sku": "P-1", "quantity": 2}]}
    )
    assert created == {"order_id": "O-2", "total": 25.0, "status": "pending"}
    assert s["products"]["P-1"]["stock"] == 1 and s["next_order"] == 3
    with pytest.raises(ToolError, match="only 1 of P-1 in stock, 2 requested"):
        tools.create_order(s, {"customer_id": "C-1", "items": [{"sku": "P-1", "quantity": 2}]})
    with pytest.raises(ToolError, match="no product 'P-9'"):
        tools.create_order(s, {"customer_id": "C-1", "items": [{"sku": "P-9", "quantity": 1}]})
    with pytest.raises(ToolError, match="'quantity' must be a whole number"):
        tools.create_order(s, {"customer_id": "C-1", "items": [{"sku": "P-1", "quantity": "2"}]})
    assert s["products"]["P-1"]["stock"] == 1  # a refused order changes nothing

    assert [
        o["order_id"] for o in tools.list_orders(s, {"customer_id": "C-1", "status": "pending"})
    ] == ["O-2"]
    with pytest.raises(ToolError, match="only pending orders can ship"):
        tools.ship_order(s, {"order_id": "O-1"})
    assert tools.cancel_order(s, {"order_id": "O-2"})["status"] == "cancelled"
    assert s["products"]["P-1"]["stock"] == 3
    with pytest.raises(ToolError, match="only pending orders can be cancelled"):
        tools.cancel_order(s, {"order_id": "O-2"})
    with pytest.raises(ToolError, match="no order 'O-7'"):
        tools.get_order(s, {"order_id": "O-7"})
    assert tools.restock(s, {"sku": "P-2", "quantity": 5}) == {"sku": "P-2", "stock": 5}
    with pytest.raises(ToolError, match="at least 1"):
        tools.restock(s, {"sku": "P-2", "quantity": 0})
    with pytest.raises(ToolError, match="not an email address"):
        tools.send_email(s, {"to": "ada", "subject": "x", "body": "y"})
    tools.send_email(s, {"to": "ada@example.com", "subject": "Hi", "body": "Hello"})
    assert s["outbox"] == [{"to": "ada@example.com", "subject": "Hi", "body": "Hello"}]
    assert len(tools.TOOL_SCHEMAS) == len(tools.HANDLERS) == 9


def test_sessions_are_isolated_and_errors_are_tool_output() -> None:
    task = ENV.tasks()[0]
    before = copy.deepcopy(task.data["initial_state"])
    server = ENV.resources_server()

    async def scenario() -> None:
        a, b = await server.seed_session(task), await server.seed_session(task)
        sku = next(iter(before["products"]))
        await server.call_tool(a, "restock", {"sku": sku, "quantity": 7})
        assert (
            server.final_state(a)["products"][sku]["stock"] == before["products"][sku]["stock"] + 7
        )
        assert server.final_state(b) == before
        with pytest.raises(ToolError):
            await server.call_tool(b, "teleport", {})

        transport = __import__("httpx").ASGITransport(app=create_app(server))
        import httpx

        async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
            seeded = (await client.post("/seed_session", json={"task_id": task.task_id})).json()
            assert [t["name"] for t in seeded["tools"]] == list(tools.TOOL_SCHEMAS)
            refused = await client.post(
                "/tools/cancel_order",
                json={"session_id": seeded["session_id"], "arguments": {"order_id": "O-999"}},
                headers={SESSION_TOKEN_HEADER: seeded["session_token"]},
            )
            assert refused.json() == {"output": "error: no order 'O-999'", "error": True}

    asyncio.run(scenario())
    assert task.data["initial_state"] == before  # sessions work on copies


def _verdict(expected: dict, actual: dict | None, params=MANIFEST_PARAMS):
    task = Task("t", {}, {"expected_state": expected}, "", "")
    return SPEC.fn(VerifyInput(task, "", [], actual), params)


def test_state_match_positive_negative_and_malformed() -> None:
    expected = _shop()
    assert _verdict(expected, copy.deepcopy(expected)).reward == 1.0

    actual = copy.deepcopy(expected)
    actual["orders"]["O-1"]["status"] = "pending"
    actual["products"]["P-1"]["stock"] = 2
    wrong = _verdict(expected, actual)
    assert wrong.reward == 0.0
    assert (
        wrong.details["first_difference"] == 'orders.O-1.status: expected "shipped", got "pending"'
    )
    assert wrong.details["difference_count"] == 2

    more = copy.deepcopy(expected)
    more["outbox"].append({"to": "ada@example.com", "subject": "Hi", "body": "x"})
    assert _verdict(expected, more).details["first_difference"] == (
        "outbox: expected 0 item(s), got 1"
    )
    extra = copy.deepcopy(expected)
    extra["notes"] = "hi"
    assert _verdict(expected, extra).details["first_difference"] == 'notes: unexpected "hi"'
    bool_for_int = copy.deepcopy(expected)
    bool_for_int["next_order"] = True
    assert _verdict({"next_order": 1}, {"next_order": True}).reward == 0.0
    assert _verdict({"next_order": 2}, {"next_order": 2.0}).reward == 1.0
    # Deep inside a subtree that == calls equal, the walk still tells True from 1 (equal subtrees
    # are skipped only when their types match all the way down) and still takes 3.0 for 3.
    nested_bool = copy.deepcopy(expected)
    nested_bool["orders"]["O-1"]["items"][0]["quantity"] = True
    assert nested_bool == expected
    assert _verdict(expected, nested_bool).details["differences"] == [
        "orders.O-1.items.0.quantity: expected 1, got true"
    ]
    nested_float = copy.deepcopy(expected)
    nested_float["orders"]["O-1"]["items"][0]["quantity"] = 1.0
    assert _verdict(expected, nested_float).reward == 1.0

    with pytest.raises(VerifierError) as missing:
        _verdict(expected, None)
    assert missing.value.kind == "missing_state"
    with pytest.raises(VerifierError) as bad:
        SPEC.fn(VerifyInput(Task("t", {}, {}, "", ""), "", [], {}), MANIFEST_PARAMS)
    assert bad.value.kind == "bad_task_data"


def test_state_match_ignore_and_unordered() -> None:
    emails = [
        {"to": "a@x.io", "subject": "1", "body": "b1"},
        {"to": "b@x.io", "subject": "2", "body": "b2"},
    ]
    swapped = [dict(emails[1], body="other"), dict(emails[0], body="words")]
    assert _verdict({"outbox": emails}, {"outbox": swapped}).reward == 1.0
    strict = SPEC.params({})
    result = _verdict({"outbox": emails}, {"outbox": swapped}, params=strict)
    assert result.details["first_difference"] == 'outbox.0.body: expected "b1", got "other"'
    with pytest.raises(ValueError, match="state_match"):
        SPEC.params({"ignore": "outbox"})


def test_generated_tasks() -> None:
    tasks = ENV.tasks("test")
    assert len(tasks) == 240 and len({t.task_id for t in tasks}) == 240
    assert {t.data["family"] for t in tasks} == {
        "place_order",
        "cancel_order",
        "restock_low",
        "ship_pending",
    }
    used_tools, parallel = set(), 0
    for task in tasks:
        plan = [list(turn) for turn in task.reference_actions]
        assert len(plan) >= 2
        parallel += any(len(turn) > 1 for turn in plan)
        used_tools |= {call.name for turn in plan for call in turn}
        final = play(task.data["initial_state"], plan, strict=True)
        assert _verdict(task.data["expected_state"], final).reward == 1.0
        wrong = play(
            task.data["initial_state"], [list(t) for t in task.distractor_actions], strict=False
        )
        assert _verdict(task.data["expected_state"], wrong).reward == 0.0, task.task_id
    assert len(used_tools) >= 8 and parallel >= 100
    mistakes = {t.data["distractor_mistake"] for t in tasks}
    assert mistakes == {"wrong_tool", "wrong_argument", "stopped_early"}
    assert ENV.tasks("test")[5] is tasks[5]
    assert load_environment("backoffice").dataset_version("test") == ENV.dataset_version("test")


def executed_calls(trajectory: list[dict]) -> list[list[ToolCall]]:
    """The tool calls the server ran (not those refused), grouped by turn."""
    outputs = {i["call_id"]: i["output"] for i in trajectory if i["type"] == "function_call_output"}
    turns, previous = [], None
    for item in trajectory:
        if item["type"] == "function_call":
            if previous != "function_call":
                turns.append([])
            if not outputs[item["call_id"]].startswith("error:"):
                turns[-1].append(ToolCall(item["name"], json.loads(item["arguments"])))
        previous = item["type"]
    return turns


@pytest.mark.prefect  # `gym eval run`: a flow on the suite's Prefect server
def test_backoffice_end_to_end_through_gym_eval_run(tmp_path: Path, prefect_api: str) -> None:
    gym(
        "eval",
        "run",
        "--benchmark",
        "backoffice",
        "--limit",
        "12",
        "--repeats",
        "2",
        "--out",
        "runs/bo",
        cwd=tmp_path,
        env={"PREFECT_API_URL": prefect_api},
        check=True,
    )
    con = duckdb.connect(str(tmp_path / "runs" / "bo" / "gymflow.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT r.task_id, r.num_turns, r.trajectory_json, v.verifier_version, v.passed, "
        "v.details_json FROM rollouts r JOIN verifications v USING (rollout_id) "
        "WHERE r.status = 'completed' AND v.status = 'ok'"
    ).fetchall()
    assert len(rows) == 24
    tasks = {t.task_id: t for t in ENV.tasks("test")[:12]}
    outcomes = set()
    for task_id, num_turns, trajectory, version, passed, details in rows:
        task = tasks[task_id]
        assert version.startswith("state_match@") and num_turns >= 2
        # the session's state is exactly what replaying the executed calls gives
        replayed = play(
            task.data["initial_state"], executed_calls(json.loads(trajectory)), strict=True
        )
        verdict = _verdict(task.data["expected_state"], replayed)
        assert passed == (verdict.reward == 1.0)
        if not passed:
            assert json.loads(details)["first_difference"] == verdict.details["first_difference"]
        outcomes.add(passed)
    assert outcomes == {True, False}
