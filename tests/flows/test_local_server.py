"""`gym server --start`: one local Prefect server, and a report server beside it, that later
commands reuse (and that keeps their runs), stopped by `gym server --stop`, as a user would run
them; with links planted under PREFECT_HOME and a stale record beforehand, neither followed nor
trusted. (tests/test_local_server_record.py covers the record without a real server.)"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict

import httpx
import pytest

from gymflow.cli import local_prefect
from gymflow.cli.local_prefect import LOCK_FILE, LOG_FILE, REPORTS_LOG_FILE, STATE_FILE
from tests.conftest import gym

pytestmark = pytest.mark.prefect


def test_commands_reuse_the_local_server_until_it_is_stopped(tmp_path):
    home = tmp_path / "prefect-home"
    home.mkdir()
    # an empty PREFECT_API_URL is unset, whatever the test process itself points at
    env = {"PREFECT_HOME": str(home), "PREFECT_API_URL": ""}
    # a record left by a server that died, whose pid a process of another kind now holds
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        started, _ = local_prefect.identity(sleeper.pid)
        stale = local_prefect.Recorded(sleeper.pid, started, ["prefect"], "http://127.0.0.1:1/api")
        server = local_prefect.LocalServer(stale, stale, str(tmp_path), str(home / LOG_FILE))
        (home / STATE_FILE).write_text(json.dumps(asdict(server)))
        off_terminal = gym("demo", "--out", "runs/ephemeral", cwd=tmp_path, env=env, check=True)
        # (not "no traceback": Prefect's own ephemeral events worker logs some under load)
        assert "Failed to reach API" not in off_terminal.stderr
        assert f"pid {sleeper.pid} is now another process" in off_terminal.stderr
        assert "started a local Prefect server" not in off_terminal.stderr  # scripts, CI, tests
        assert not (home / STATE_FILE).exists()
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
    # links planted where gymflow writes: the files they point at must stay as they are
    targets = {}
    for name in (STATE_FILE, LOG_FILE, REPORTS_LOG_FILE, LOCK_FILE):
        targets[name] = tmp_path / f"target-{name}"
        targets[name].write_text("precious")
        (home / name).unlink(missing_ok=True)
        (home / name).symlink_to(targets[name])
    planted = gym("server", "--start", cwd=tmp_path, env=env)
    assert planted.returncode == 1 and "Traceback" not in planted.stderr
    assert f"{home / LOCK_FILE} is a symbolic link" in planted.stderr.splitlines()[-1]
    assert all(target.read_text() == "precious" for target in targets.values())
    for name in targets:
        (home / name).unlink()
    # GYMFLOW_LOCAL_PREFECT=on: the first command that runs a flow starts it, and says so
    first_use = {**env, "GYMFLOW_LOCAL_PREFECT": "on"}
    try:
        first = gym("demo", "--out", "runs/first", cwd=tmp_path, env=first_use, timeout=400)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "started a local Prefect server" in first.stderr, first.stderr
        assert "gym server --stop" in first.stderr
        state = json.loads((home / STATE_FILE).read_text())
        api, reports = state["prefect"]["url"], state["reports"]["url"]
        again = gym("server", "--start", cwd=tmp_path, env=env)
        assert f"local Prefect server: {api}" in again.stdout  # reused, not a second one
        demo = gym("demo", "--out", "runs/demo", cwd=tmp_path, env=env, check=True)
        assert "ephemeral" not in demo.stderr and "started" not in demo.stderr
        runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 50}, timeout=30).json()
        completed = [r for r in runs if r["name"] and r["state_type"] == "COMPLETED"]
        assert len(completed) >= 2  # both runs against it are in its history
        # the report link each run left is served by the report server beside it
        artifacts = httpx.post(f"{api}/artifacts/filter", json={"limit": 50}, timeout=30).json()
        links = [a["data"] for a in artifacts if a["key"] == "gymflow-report"]
        assert f"({reports}/runs/demo/report.html)" in "".join(links), links
        page = httpx.get(f"{reports}/runs/demo/report.html", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
        told = gym("server", cwd=tmp_path, env=env, check=True)
        assert f"connected to the Prefect server at {api}" in told.stdout
    finally:
        stopped = gym("server", "--stop", cwd=tmp_path, env=env)
    assert stopped.returncode == 0 and "stopped the local Prefect server" in stopped.stdout
    assert not (home / STATE_FILE).exists()
    for url in (f"{api}/health", reports):
        with pytest.raises(httpx.TransportError):
            httpx.get(url, timeout=2)
    for process in ("prefect", "reports"):
        assert local_prefect.identity(state[process]["pid"]) is None, process
