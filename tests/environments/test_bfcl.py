"""BFCL: data from the installed bfcl-eval package, tools as Responses API function tools, the
possible-answer verifier, and `gym eval run` end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gymflow.builtin.bfcl.env import json_schema, tool_name, tools_of
from gymflow.core.tasks import Task
from gymflow.environments.registry import load_environment
from gymflow.store.tool_lists import expanded
from gymflow.verifiers.base import VerifyInput, get_verifier
from tests.conftest import gym
from tests.environments.runs import run_benchmark

SPEC = get_verifier("bfcl")


@pytest.fixture(scope="module")
def env():
    return load_environment("bfcl")


@pytest.fixture(scope="module")
def by_id(env) -> dict[str, Task]:
    return {task.task_id: task for task in env.tasks("all")}


def calls(*pairs: tuple[str, Any]) -> list[dict[str, Any]]:
    """A trajectory: the question, then one function_call item per (name, arguments)."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "q"}]
    for i, (name, arguments) in enumerate(pairs):
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        items.append({"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": raw})
    return items


def verify(task: Task, trajectory: list[dict[str, Any]], text: str = ""):
    return SPEC.fn(VerifyInput(task, text, trajectory), SPEC.params({}))


def played(task: Task, plan) -> list[dict[str, Any]]:
    return calls(*[(c.name, c.arguments) for turn in plan for c in turn])


# -- data and tools ------------------------------------------------------------------------------
def test_categories_load_from_the_package_without_importing_it(env) -> None:
    sizes = {split: len(env.tasks(split)) for split in env.manifest.splits}
    assert sizes == {
        "simple": 400,
        "multiple": 200,
        "parallel": 200,
        "parallel_multiple": 200,
        "irrelevance": 240,
        "all": 1240,
        "smoke": 100,
    }
    # in a process of its own: another test of this worker may have imported the checker
    probe = (
        "import sys; from gymflow.environments.registry import load_environment; "
        "env = load_environment('bfcl'); [env.tasks(s) for s in env.manifest.splits]; "
        "print(sorted(m for m in sys.modules if m.startswith('bfcl_eval.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_tools_are_responses_api_function_tools(by_id) -> None:
    task = by_id["simple_python_1"]
    assert tools_of(task) == [
        {
            "type": "function",
            "name": "math_factorial",
            "description": "Calculate the factorial of a given number.",
            "parameters": {
                "type": "object",
                "properties": {
                    "number": {
                        "type": "integer",
                        "description": "The number for which factorial needs to be calculated.",
                    }
                },
                "required": ["number"],
            },
        }
    ]
    assert task.data["name_map"] == {"math_factorial": "math.factorial"}
    for task in by_id.values():
        for tool in tools_of(task):
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])
            text = json.dumps(tool["parameters"])
            assert not re.search(r'"type": "(dict|float|tuple|any)"', text), tool["name"]


def test_schema_conversion() -> None:
    bfcl = {
        "type": "dict",
        "properties": {
            "point": {"type": "tuple", "items": {"type": "float"}},
            "anything": {"type": "any", "description": "free"},
            "opts": {"type": "dict", "properties": {"k": {"type": "string"}}, "optional": True},
        },
        "required": ["point"],
    }
    assert json_schema(bfcl) == {
        "type": "object",
        "properties": {
            "point": {"type": "array", "items": {"type": "number"}},
            "anything": {"description": "free"},
            "opts": {"type": "object", "properties": {"k": {"type": "string"}}},
        },
        "required": ["point"],
    }
    assert tool_name("a.b.c") == "a_b_c" and tool_name("x" * 80) == "x" * 64


def test_resources_server_offers_each_tasks_own_tools(env, by_id) -> None:
    server = env.resources_server()
    first, second = by_id["multiple_0"], by_id["simple_python_0"]
    assert [t["name"] for t in server.tools_for(first)] == [
        t["name"] for t in tools_of(first)
    ] and len(server.tools_for(first)) > 1
    assert [t["name"] for t in server.tools_for(second)] == ["calculate_triangle_area"]


# -- the verifier --------------------------------------------------------------------------------
def test_every_reference_passes_and_every_distractor_fails(env) -> None:
    wrong = []
    for task in env.tasks("all"):
        good = verify(task, played(task, task.reference_actions), task.reference)
        bad = verify(task, played(task, task.distractor_actions), task.distractor)
        assert good.reward == 1.0, (task.task_id, good.details)
        if bad.reward != 0.0:
            wrong.append(task.task_id)
        assert bad.details["reason"] != "match"
    assert wrong == []


def test_simple_possible_answer_semantics(by_id) -> None:
    task = by_id["simple_python_0"]  # base [10], height [5], unit ["units", ""]
    name = "calculate_triangle_area"
    assert verify(task, calls((name, {"base": 10, "height": 5}))).reward == 1.0  # unit omitted
    assert verify(task, calls((name, {"base": 10, "height": 5, "unit": "Units"}))).reward == 1.0
    result = verify(task, calls((name, {"base": 10, "height": 6})))
    assert result.reward == 0.0
    assert "'height' = 6, expected one of [5]" in result.details["mismatch"]
    result = verify(task, calls((name, {"base": 10})))
    assert "missing required parameter 'height'" in result.details["mismatch"]
    result = verify(task, calls((name, {"base": 10, "height": 5, "colour": "red"})))
    assert "unexpected parameter 'colour'" in result.details["mismatch"]
    result = verify(task, calls((name, {"base": "10", "height": 5})))
    assert "'base' should be integer, got str" in result.details["mismatch"]
    result = verify(task, calls(("calculate_circle_area", {"base": 10, "height": 5})))
    assert "called 'calculate_circle_area', expected 'calculate_triangle_area'" in str(
        result.details["mismatch"]
    )


def test_dotted_names_map_back_and_integers_pass_for_floats(by_id) -> None:
    task = by_id["simple_python_1"]
    assert verify(task, calls(("math_factorial", {"number": 5}))).reward == 1.0
    parallel = by_id["parallel_multiple_1"]  # area_rectangle.calculate wants floats 7.0 and 3.0
    reference = [(c.name, c.arguments) for c in parallel.reference_actions[0]]
    as_ints = [
        (n, {k: int(v) if isinstance(v, float) else v for k, v in a.items()}) for n, a in reference
    ]
    assert verify(parallel, calls(*as_ints)).reward == 1.0


def test_dict_parameters_match_key_by_key(by_id) -> None:
    task = by_id["simple_python_89"]  # conditions: department Science, school Bluebird High/HS
    base = {"database_name": "StudentDB", "table_name": "students"}
    for school, reward in (("Bluebird HS", 1.0), ("bluebird high school", 1.0), ("Elm", 0.0)):
        conditions = {"department": "Science", "school": school}
        result = verify(task, calls(("db_fetch_records", {**base, "conditions": conditions})))
        assert result.reward == reward, (school, result.details)
    result = verify(task, calls(("db_fetch_records", {**base, "conditions": {"grade": "A"}})))
    assert "'conditions'" in result.details["mismatch"]


def test_parallel_calls_match_in_any_order_but_not_twice(by_id) -> None:
    task = by_id["parallel_0"]  # spotify.play Taylor Swift 20, Maroon 5 15
    swift = ("spotify_play", {"artist": "Taylor Swift", "duration": 20})
    maroon = ("spotify_play", {"artist": "Maroon 5", "duration": 15})
    assert verify(task, calls(swift, maroon)).reward == 1.0
    assert verify(task, calls(maroon, swift)).reward == 1.0
    result = verify(task, calls(swift, swift))
    assert result.reward == 0.0 and "expected call 2" in result.details["mismatch"]
    result = verify(task, calls(swift))
    assert result.details["mismatch"] == "made 1 function call(s), expected 2"


def test_irrelevance_passes_only_without_calls(by_id) -> None:
    task = by_id["irrelevance_0"]
    assert verify(task, calls(), "I cannot help with that using these tools.").reward == 1.0
    result = verify(task, calls(("determine_body_mass_index", {"weight": 70, "height": 1.8})))
    assert (result.reward, result.details["reason"]) == (0.0, "called_irrelevant")


def test_malformed_and_missing_calls(by_id) -> None:
    task = by_id["simple_python_1"]
    result = verify(task, calls(("math_factorial", '{"number": 5')))
    assert (result.reward, result.details["reason"]) == (0.0, "malformed_call")
    result = verify(task, calls(("math_factorial", "[5]")))
    assert (result.reward, result.details["reason"]) == (0.0, "malformed_call")
    result = verify(task, calls(), "The factorial of 5 is 120.")
    assert (result.reward, result.details["reason"]) == (0.0, "no_call")


# -- end to end ----------------------------------------------------------------------------------
def test_gym_eval_run_end_to_end(tmp_path: Path, by_id, prefect_api: str) -> None:
    con = run_benchmark(
        tmp_path, "bfcl-smoke", "bfcl", limit=30, repeats=2, prefect_api=prefect_api
    )
    # Each model call offered exactly the task's own tools.
    offered = con.execute(
        f"SELECT r.task_id, {expanded('m.request_json')} "
        "FROM model_calls m JOIN rollouts r USING (rollout_id)"
    ).fetchall()
    assert len(offered) >= 60
    for task_id, request in offered:
        names = [tool["name"] for tool in json.loads(request)["tools"]]
        assert names == [tool["name"] for tool in tools_of(by_id[task_id])]
    rows = con.execute(
        """SELECT r.task_id, v.status, v.passed, v.details_json
           FROM rollouts r JOIN verifications v USING (rollout_id)"""
    ).fetchall()
    assert len(rows) == 60 and {status for _, status, _, _ in rows} == {"ok"}
    passes = sum(passed for _, _, passed, _ in rows)
    assert 10 <= passes <= 50, passes
    for _, _, passed, details in rows:
        reason = json.loads(details)["reason"]
        assert (reason == "match") == passed
    # A function call is an answer: the passing calls are no verifier suspects and no
    # rollout is an empty output; a single-turn rollout is never stopped at max turns.
    out = tmp_path / "run"
    diagnosis = json.loads(
        gym("eval", "diagnose", str(out), "--json", cwd=tmp_path, check=True).stdout
    )
    assert diagnosis["verifier_suspects"] == []
    assert diagnosis["decision"]["action"] != "verifier_repair"
    assert {row["category"] for row in diagnosis["taxonomy"]} <= {"wrong_answer", "no_answer"}
    health = json.loads(gym("eval", "health", str(out), "--json", cwd=tmp_path).stdout)
    assert health["checks"]["empty_output"]["count"] == 0
    assert health["checks"]["tools_never_called"]["count"] == 0
    sft = tmp_path / "sft.jsonl"
    gym(
        *("data", "trajectories", str(out), "--out", str(sft), "--kind", "passing"),
        *("--pass-rate", "[0,1]", "--keep-duplicates"),
        cwd=tmp_path,
        check=True,
    )
    written = [json.loads(line) for line in sft.read_text().splitlines()]
    assert len(written) >= passes - health["unhealthy_rollouts"] > 0
    assert any(m.get("tool_calls") for row in written for m in row["messages"])
