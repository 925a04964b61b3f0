"""End to end on a real model: `gym eval run` (a subprocess, as a user runs it) of small subsets
of arithmetic, math, ifeval, humaneval and bfcl against SmolLM2-135M-Instruct behind llama.cpp's
server (`chat_completions`), and through LiteLLM's proxy (`responses`). On the stored outputs,
gymflow's verdicts must agree with each benchmark's own checker (references.py), every rollout
must carry its model-call evidence, and health must say what happened.

The runs are in tests/real_model/plans.py; `python -m tests.real_model.record` keeps the same runs
as fixtures for the tests that need no server (test_recorded.py)."""

from __future__ import annotations

import json
from collections.abc import Callable

import duckdb
import pytest

from tests.conftest import gym_in_process
from tests.real_model import references
from tests.real_model.conftest import RealRun, eval_run
from tests.real_model.plans import RUN_SCENARIOS, RUNS, by_name


@pytest.fixture(scope="session")
def real_run(
    llama_servers: Callable[[str], str],
    tmp_path_factory: pytest.TempPathFactory,
    prefect_api: str,
    request,
) -> Callable[[str], RealRun]:
    """`real_run(name)`: the run of plan `name` against its own model's server (Gemma's plans
    against Gemma's), made on first use and kept for the session."""
    cwd = tmp_path_factory.mktemp("real-runs")
    done: dict[str, RealRun] = {}

    def run(name: str) -> RealRun:
        if name not in done:
            plan = by_name(name)
            if plan.via == "chat":
                url = llama_servers(plan.server)
            else:  # LiteLLM's proxy fronts SmolLM2's server only
                assert plan.server == "smollm2", plan
                url = request.getfixturevalue("litellm_real")
            done[name] = eval_run(plan, url, cwd, prefect_api)
        return done[name]

    return run


def _query(run: RealRun, sql: str) -> list[tuple]:
    con = duckdb.connect(str(run.run_dir / "gymflow.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _json(run: RealRun, *command: str) -> dict:
    """A read of the stored run (health, profile, diagnose): in this process, as the run itself
    was made by `gym` in a process of its own; the read's process adds nothing to the check."""
    result = gym_in_process(*command, str(run.run_dir), "--json", cwd=run.run_dir.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", [plan.name for plan in RUNS])
def test_a_real_run_is_complete_evidenced_and_healthy(real_run, name: str) -> None:
    run = real_run(name)
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    limit = run.spec["limit"]
    # every rollout answered (the server is up and one call is in flight at a time)
    statuses = _query(run, "SELECT status, failure_kind, count(*) FROM rollouts GROUP BY ALL")
    assert statuses == [("completed", None, limit)], statuses
    # the model's own answer as evidence: one 200 per rollout, what was sent, what came back
    calls = _query(
        run,
        """SELECT count(*), count(DISTINCT rollout_id), min(http_status), max(http_status),
                  bool_and(output_tokens > 0), bool_and(input_tokens > 0),
                  bool_and(sampling_json::JSON->>'temperature' = '0.0')
           FROM model_calls""",
    )
    assert calls == [(limit, limit, 200, 200, True, True, True)], calls
    assert _query(run, "SELECT model FROM runs") == [(by_name(name).model,)]
    health = _json(run, "eval", "health")
    assert health["verdict"] == "healthy" and health["gate"] == "pass", health
    assert (health["rollouts"], health["expected"]) == (limit, limit)
    profile = _json(run, "eval", "profile")
    coverage = profile["coverage"]
    assert (coverage["expected"], coverage["scored"], coverage["missing"]) == (limit, limit, 0)


@pytest.mark.parametrize("name", list(references.CHECKERS))
def test_verdicts_agree_with_the_benchmarks_own_checker(real_run, name: str) -> None:
    run = real_run(name)
    rows = references.scored_rollouts(run.run_dir)
    assert len(rows) == run.spec["limit"]
    comparisons = references.compare(name, rows)
    for comparison in comparisons:
        assert comparison.n > 0, comparison.report()
    problems = [c.report() for c in comparisons if c.disagreements]
    assert not problems, "\n".join(problems)


def test_litellm_responses_answer_as_the_server_does(real_run) -> None:
    """The same model through LiteLLM's Responses bridge, at temperature 0: the same text, token
    counts and verdicts on the tasks both runs hold."""
    direct, proxied = real_run("arithmetic"), real_run("arithmetic-litellm")
    sql = """SELECT r.task_id, r.output_text, r.output_tokens, v.passed FROM rollouts r
             JOIN verifications v USING (rollout_id) ORDER BY r.task_id"""
    through_proxy = _query(proxied, sql)
    assert len(through_proxy) == proxied.spec["limit"]
    by_task = {row[0]: row for row in _query(direct, sql)}
    assert through_proxy == [by_task[row[0]] for row in through_proxy]
    (kind,) = _query(proxied, "SELECT DISTINCT config_json::JSON->'model'->>'kind' FROM runs")
    assert kind == ("responses",)


def _function_calls(run: RealRun) -> int:
    trajectories = _query(run, "SELECT trajectory_json FROM rollouts")
    items = [item for (text,) in trajectories for item in json.loads(text)]
    return sum(item.get("type") == "function_call" for item in items)


def test_tool_calls_come_only_when_a_tool_choice_is_sent(real_run) -> None:
    """llama.cpp's function-calling handler ignores tools offered without a `tool_choice`; with
    LiteLLM adding `tool_choice: auto` the same model calls them."""
    assert _function_calls(real_run("bfcl")) == 0
    assert _function_calls(real_run("bfcl-tools")) > 0
    offered = "SELECT count(*) FROM model_calls WHERE (request_json::JSON->'tools') IS NOT NULL"
    assert _query(real_run("bfcl"), offered)[0][0] == by_name("bfcl").limit


@pytest.mark.parametrize("name", sorted(RUN_SCENARIOS))
def test_the_decision_on_a_real_run_is_right_for_what_happened(real_run, name: str) -> None:
    """Rests on issue 26's diagnosis rules (h/diagnose): a model that cannot do the arithmetic
    needs training, not a prompt change; a server that ignores the offered tools is harness
    work, and health says the tools were never called."""
    run = real_run(name)
    broken, expected = RUN_SCENARIOS[name]
    decision = _json(run, "eval", "diagnose")["decision"]
    assert decision["action"] == expected, (broken, decision["why"])
    never_called = "tools_never_called" in _json(run, "eval", "health")["warnings"]
    assert never_called == (name == "bfcl")
