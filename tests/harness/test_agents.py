"""The real mini-swe-agent and Codex binaries under `gym eval run`, driven by the scripted model
(`gym serve model --workspace-tasks`) through the recording proxy, in the bubblewrap sandbox:
each solves shipped workspace tasks end to end (model, agent, sandbox, test script, reward), and
the model calls its own log counts equal the calls the proxy recorded. Skipped locally without
the installs, a failure in CI."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from gymflow.harness.agents import CODEX_PREFIX, MINI_SWE_AGENT, MINI_VENV
from gymflow.simulated.local_server import free_port
from tests.conftest import GYM, gym, require_tool
from tests.interop.test_atif import harbor_python, validate
from tests.owner import OWNER, as_owner, non_root_user, owner_env, owner_folder
from tests.servers import serving, venv_with

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"
INSTALLS = {
    "mini-swe-agent": (*MINI_VENV, "mini", "the GYMFLOW_MINISWE_VENV step of .ci/run"),
    "codex": (*CODEX_PREFIX, "codex", "the GYMFLOW_CODEX_PREFIX step of .ci/run"),
}


@pytest.fixture(scope="module")
def scripted_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`gym serve model --workspace-tasks` on the shipped tasks, as a user starts it."""
    port = free_port()
    command = [GYM, "serve", "model", "--workspace-tasks", str(SHIPPED), "--port", str(port)]
    log = tmp_path_factory.mktemp("scripted") / "serve.log"
    with serving(command, f"http://127.0.0.1:{port}/health", log):
        assert "workspace tasks" in log.read_text()
        yield f"http://127.0.0.1:{port}/v1"


def run_agent(agent: str, base_url: str, cwd: Path, prefect_api: str, **extra) -> Path:
    """`gym eval run` of `agent` on the first shipped tasks; returns the run's store."""
    require_tool("bwrap")
    venv_with(*INSTALLS[agent])
    config = {
        "benchmark": "workspace-basics",
        "limit": extra.pop("limit", 3),
        "repeats": 1,
        "harness": {"name": "command", "agent": agent, "max_turns": extra.pop("max_turns", 8)},
        "model": {"kind": "responses", "base_url": base_url, "name": "scripted",
                  "max_retries": 0, "timeout_s": 300},
        "out": f"runs/{agent}",
        "concurrency": 1,
        **extra,
    }  # fmt: skip
    (cwd / "eval.yaml").write_text(json.dumps(config))
    result = gym("eval", "run", "eval.yaml", cwd=cwd, timeout=1200,
                 env={"PREFECT_API_URL": prefect_api})  # fmt: skip
    store = cwd / "runs" / agent / "gymflow.duckdb"
    assert store.exists(), f"{result.stdout}\n{result.stderr}"
    return store


def outcomes(store: Path) -> list[tuple]:
    """(task, status, failure kind, reward, calls recorded, calls in the agent's own log)."""
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute(
            """
            SELECT r.task_id, r.status, r.failure_kind, v.reward,
                   (SELECT count(DISTINCT call_index) FROM model_calls m
                    WHERE m.rollout_id = r.rollout_id),
                   TRY_CAST(json_extract(r.counters_json, '$.agent_logged_calls') AS INTEGER)
            FROM rollouts r LEFT JOIN verifications v USING (rollout_id) ORDER BY r.task_id
            """
        ).fetchall()


@pytest.mark.parametrize("agent", ["mini-swe-agent", "codex"])
def test_the_scripted_model_drives_the_real_agent_to_the_reward(
    agent: str, scripted_model: str, tmp_path: Path, prefect_api: str
) -> None:
    store = run_agent(agent, scripted_model, tmp_path, prefect_api)
    rows = outcomes(store)
    assert len(rows) == 3
    for task, status, kind, reward, recorded, logged in rows:
        assert (status, kind, reward) == ("completed", None, 1.0), (task, status, kind, reward)
        # the solution run in its shell tool, then its way of finishing: two calls, both counted
        assert recorded == logged == 2, (task, recorded, logged)
    with duckdb.connect(str(store), read_only=True) as con:
        (config,) = con.execute("SELECT config_json FROM runs").fetchone()
        trajectories = [
            json.loads(t) for (t,) in con.execute("SELECT trajectory_json FROM rollouts").fetchall()
        ]
    # the agent's own account (its trajectory file, its --json events), not gymflow's
    for items in trajectories:
        calls = [item for item in items if item.get("type") == "function_call"]
        assert (
            calls and calls[0]["name"] == {"mini-swe-agent": "bash", "codex": "exec_command"}[agent]
        )
        assert any(item.get("type") == "function_call_output" for item in items)
    health = gym("eval", "health", str(store.parent), "--json", cwd=tmp_path, check=True)
    checks = json.loads(health.stdout)["checks"]
    assert (
        checks["text_without_call"]["status"] == "ok" and checks["no_model_calls"]["status"] == "ok"
    )
    version = json.loads(config)["harness"]["agent_version"]
    assert version.startswith(
        {"mini-swe-agent": "mini-swe-agent 2.", "codex": "@openai/codex 0."}[agent]
    )
    # each rollout as ATIF, as Harbor's own validator accepts it, naming the agent and version
    atif = tmp_path / "atif"
    gym("export", str(store.parent), "--format", "atif", "--out", str(atif), cwd=tmp_path,
        check=True)  # fmt: skip
    files = sorted(atif.glob("*.json"))
    checked = validate(harbor_python(), files)
    assert len(files) == 3 and checked.returncode == 0, checked.stdout + checked.stderr
    named = json.loads(files[0].read_text())["agent"]
    assert named == {"name": agent, "version": version, "model_name": "scripted"}


def test_a_missing_install_is_agent_install_missing(
    scripted_model: str, tmp_path: Path, prefect_api: str, monkeypatch
) -> None:
    monkeypatch.setenv("GYMFLOW_CODEX_PREFIX", str(tmp_path / "nowhere"))
    require_tool("bwrap")
    (tmp_path / "eval.yaml").write_text(json.dumps({
        "benchmark": "workspace-basics", "limit": 1, "repeats": 1, "out": "runs/missing",
        "harness": {"name": "command", "agent": "codex"},
        "model": {"kind": "responses", "base_url": scripted_model, "name": "scripted"},
    }))  # fmt: skip
    gym(
        "eval",
        "run",
        "eval.yaml",
        cwd=tmp_path,
        timeout=600,
        env={"PREFECT_API_URL": prefect_api, "GYMFLOW_CODEX_PREFIX": str(tmp_path / "nowhere")},
    )
    rows = outcomes(tmp_path / "runs" / "missing" / "gymflow.duckdb")
    assert [(status, kind, reward) for _, status, kind, reward, *_ in rows] == [
        ("failed", "agent_install_missing", None)
    ]


def test_a_prefix_the_sandbox_hides_is_refused(monkeypatch) -> None:
    """/tmp inside the sandbox is the sandbox's own: an agent installed there is not found."""
    monkeypatch.setenv("GYMFLOW_MINISWE_VENV", "/tmp")
    monkeypatch.setattr("os.access", lambda path, mode: True)
    assert "which the sandbox replaces" in (MINI_SWE_AGENT.missing() or "")


@pytest.mark.parametrize("agent", ["mini-swe-agent", "codex"])
def test_a_non_root_owner_runs_the_real_agent(
    agent: str, scripted_model: str, host_folder: Path, prefect_api: str
) -> None:
    """`gym eval run` as a real non-root user: the agent and the task's tests run as one of its
    subordinate ids (sandbox_host.sandbox_user), and still reach the reward."""
    require_tool("bwrap")
    venv_with(*INSTALLS[agent])
    uid, gid = non_root_user(OWNER, subordinate=True)
    work = owner_folder(host_folder / "owner", uid, gid)
    config = {
        "benchmark": "workspace-basics", "limit": 1, "repeats": 1,
        "harness": {"name": "command", "agent": agent, "max_turns": 8},
        "model": {"kind": "responses", "base_url": scripted_model, "name": "scripted",
                  "max_retries": 0, "timeout_s": 300},
        "out": "runs/owner", "concurrency": 1,
    }  # fmt: skip
    (work / "eval.yaml").write_text(json.dumps(config))
    os.chown(work / "eval.yaml", uid, gid)
    argv = [*as_owner(uid, gid, host_folder / "stage"), GYM, "eval", "run", "eval.yaml"]
    env = owner_env(work, PREFECT_API_URL=prefect_api)
    ran = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    store = work / "runs" / "owner" / "gymflow.duckdb"
    assert store.exists(), ran.stdout + ran.stderr
    assert "run as your own user id" not in ran.stderr, ran.stderr
    [(_, status, kind, reward, recorded, logged)] = outcomes(store)
    assert (status, kind, reward, recorded, logged) == ("completed", None, 1.0, 2, 2)
