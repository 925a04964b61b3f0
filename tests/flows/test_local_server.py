"""`gym server --start`: one local Prefect server that later commands reuse (and that keeps their
runs), stopped by `gym server --stop`, as a user would run them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from gymflow import warm_protocol
from gymflow.cli.local_prefect import STATE_FILE
from gymflow.processes import pid_alive
from tests.conftest import gym

pytestmark = pytest.mark.prefect


def test_commands_reuse_the_local_server_until_it_is_stopped(tmp_path):
    home = tmp_path / "prefect-home"
    # an empty PREFECT_API_URL is unset, whatever the test process itself points at
    env = {"PREFECT_HOME": str(home), "PREFECT_API_URL": ""}
    off_terminal = gym("demo", "--out", "runs/ephemeral", cwd=tmp_path, env=env, check=True)
    assert "started a local Prefect server" not in off_terminal.stderr  # scripts, CI, tests
    assert not (home / STATE_FILE).exists()
    # GYMFLOW_LOCAL_PREFECT=on: the first command that runs a flow starts it, and says so
    first_use = {**env, "GYMFLOW_LOCAL_PREFECT": "on"}
    try:
        first = gym("demo", "--out", "runs/first", cwd=tmp_path, env=first_use, timeout=400)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "started a local Prefect server" in first.stderr, first.stderr
        assert "gym server --stop" in first.stderr
        state = json.loads((home / STATE_FILE).read_text())
        api = state["api_url"]
        again = gym("server", "--start", cwd=tmp_path, env=env)
        assert f"local Prefect server: {api}" in again.stdout  # reused, not a second one
        # beside it, the warm process the first command started: later commands fork from it
        warm_state = home / warm_protocol.STATE_FILE
        _wait_for(warm_state.exists, home / warm_protocol.LOG_FILE)
        warm = json.loads(warm_state.read_text())["pid"]
        demo = gym("demo", "--out", "runs/demo", cwd=tmp_path, env=first_use, check=True)
        assert "ephemeral" not in demo.stderr and "started" not in demo.stderr
        warm_log = (home / warm_protocol.LOG_FILE).read_text()
        assert f"[{warm}] serving" in warm_log and "served 'demo --out runs/demo'" in warm_log
        runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 50}, timeout=30).json()
        completed = [r for r in runs if r["name"] and r["state_type"] == "COMPLETED"]
        assert len(completed) >= 2  # both runs against it are in its history
        told = gym("server", cwd=tmp_path, env=env, check=True)
        assert f"connected to the Prefect server at {api}" in told.stdout
        assert f"warm process: pid {warm}" in told.stdout
    finally:
        stopped = gym("server", "--stop", cwd=tmp_path, env=env)
    assert stopped.returncode == 0 and "stopped the local Prefect server" in stopped.stdout
    assert not (home / STATE_FILE).exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{api}/health", timeout=2)
    assert not pid_alive(state["pid"]), "the local server's process is still running"
    _wait_for(lambda: not pid_alive(warm), home / warm_protocol.LOG_FILE)
    assert not warm_state.exists()


def _wait_for(condition, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
