"""`gym server --start`: one local Prefect server that later commands reuse (and that keeps their
runs), stopped by `gym server --stop`, as a user would run them."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from gymflow.cli.local_prefect import STATE_FILE
from tests.conftest import gym

pytestmark = pytest.mark.prefect


def test_commands_reuse_the_local_server_until_it_is_stopped(tmp_path):
    home = tmp_path / "prefect-home"
    # an empty PREFECT_API_URL is unset, whatever the test process itself points at
    env = {"PREFECT_HOME": str(home), "PREFECT_API_URL": ""}
    started = gym("server", "--start", cwd=tmp_path, env=env, timeout=240)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        state = json.loads((home / STATE_FILE).read_text())
        api = state["api_url"]
        again = gym("server", "--start", cwd=tmp_path, env=env)
        assert f"local Prefect server: {api}" in again.stdout  # reused, not a second one
        demo = gym("demo", "--out", "runs/demo", cwd=tmp_path, env=env, check=True)
        assert "ephemeral" not in demo.stderr
        runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 50}, timeout=30).json()
        assert any(r["name"] and r["state_type"] == "COMPLETED" for r in runs)
        told = gym("server", cwd=tmp_path, env=env, check=True)
        assert f"connected to the Prefect server at {api}" in told.stdout
    finally:
        stopped = gym("server", "--stop", cwd=tmp_path, env=env)
    assert stopped.returncode == 0 and "stopped the local Prefect server" in stopped.stdout
    assert not (home / STATE_FILE).exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{api}/health", timeout=2)
    try:
        os.kill(state["pid"], 0)
    except ProcessLookupError:
        pass
    else:
        pytest.fail("the local server's process is still running")
