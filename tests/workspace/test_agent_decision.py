"""The decision on a real run whose cause is known: an agent (a command line of its own) that asks
the model once through the recording proxy, then crashes (SIGSEGV) on every shipped task but the
CSV ones, where it exits having done nothing. The crashes are the harness's, the CSV tasks the
answer failing; the decision must be harness work, with the crashes as its evidence, the
experiment rerunning them under gymflow's own agent, and model training read from the CSV tasks
only."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym, require_tool

pytestmark = pytest.mark.slow

#: One model call with the task's instruction (the simulated policy knows the task by it), then
#: a crash unless the instruction names a CSV file.
AGENT = (
    "python3 -c 'import json, os, urllib.request as u\n"
    'body = {"model": "m", "messages": [{"role": "user", '
    '"content": os.environ["GYMFLOW_INSTRUCTION"]}]}\n'
    'request = u.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", '
    'json.dumps(body).encode(), {"Content-Type": "application/json", '
    '"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})\n'
    "u.urlopen(request, timeout=120).read()' "
    '&& case "$GYMFLOW_INSTRUCTION" in *.csv*) true;; *) kill -SEGV $$;; esac'
)


def test_an_agent_crashing_on_most_tasks_is_decided_harness_work(
    tmp_path: Path, prefect_api: str
) -> None:
    require_tool("bwrap")
    config = {
        "benchmark": "workspace-basics",
        "repeats": 1,
        "harness": {"name": "command", "command": AGENT, "agent_version": "crasher 1"},
        "out": "runs/crasher",
        "concurrency": 2,
    }
    (tmp_path / "eval.yaml").write_text(json.dumps(config))
    env = {"PREFECT_API_URL": prefect_api}
    ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, timeout=1200, env=env)
    store = tmp_path / "runs" / "crasher" / "gymflow.duckdb"
    assert store.exists(), ran.stdout + ran.stderr
    with duckdb.connect(str(store), read_only=True) as con:
        rows = con.execute(
            """
            SELECT r.task_id, r.status, r.failure_kind, v.passed,
                   (SELECT count(*) FROM model_calls m WHERE m.rollout_id = r.rollout_id)
            FROM rollouts r LEFT JOIN verifications v USING (rollout_id) ORDER BY r.task_id
            """
        ).fetchall()
    crashed = sorted(t for t, status, kind, _, _ in rows if kind == "agent_crashed")
    answered = sorted(t for t, status, kind, passed, _ in rows if status == "completed")
    assert len(crashed) > 2 * len(answered) > 0, rows
    assert all(calls == 1 for *_, calls in rows), rows
    assert not any(passed for _, _, _, passed, _ in rows)

    decided = gym("eval", "decide", str(store.parent), "--json", cwd=tmp_path, env=env)
    decision = json.loads(decided.stdout)["decision"]
    assert decision["action"] == "harness_work", decision["why"]
    assert decision["evidence"]["categories"] == {"agent_failed": len(crashed)}
    assert f"agent_crashed: {len(crashed)}" in decision["why"]
    experiment = decision["experiment"]
    assert experiment["change"]["harness"]["agent"] == "tool_loop"
    assert sorted(experiment["tasks"]) == crashed
    (training,) = [c for c in decision["candidates"] if c["action"] == "model_training"]
    assert sorted(training["experiment"]["tasks"]) == answered

    # The experiment's prediction is that the lost rollouts end judged under gymflow's own agent,
    # whatever their verdict: the confirmation measures the judged share, not the pass rate
    # (which the crashed rollouts, never scored, cannot have before).
    confirmed = gym("eval", "decide", str(store.parent), "--confirm", "--json", cwd=tmp_path,
                    env=env, timeout=1200)  # fmt: skip
    outcome = json.loads(confirmed.stdout)["confirmation"]
    assert outcome["experiment"]["measure"] == "judged_share"
    assert outcome["ran"] and outcome["effect"], outcome["why"]
    assert outcome["before"] == 0.0 and outcome["after"] == 1.0, outcome
    assert (outcome["tasks"], outcome["gained"], outcome["lost"]) == (len(crashed), len(crashed), 0)
    assert "judged share 0% -> 100%" in outcome["why"]
