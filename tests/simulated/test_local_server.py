"""The local policy server's process: ready the moment it listens (it says so through a pipe),
stopped without the run waiting for it, and never left behind by the command that started it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymflow.core.errors import RuntimeFailure
from gymflow.core.processes import answers_ok
from gymflow.simulated import local_server
from gymflow.simulated.local_server import LocalPolicyServer
from tests.conftest import GYM


def _gone(pid: int) -> bool:
    """True once no process (not even an unreaped zombie) holds `pid`."""
    return not Path(f"/proc/{pid}").exists()


def test_a_ready_server_answers_at_once() -> None:
    server = LocalPolicyServer({}).launch()
    try:
        server.wait_ready()
        assert answers_ok(f"http://127.0.0.1:{server.port}/health")
        assert server.wait_ready() is server  # a second wait returns at once
    finally:
        server.stop()


def test_a_server_that_ends_before_listening_is_an_error_not_a_wait() -> None:
    server = LocalPolicyServer({}, startup_timeout_s=600).launch()
    server._tmp.cleanup()  # its table is gone: the server exits before it listens
    with pytest.raises(RuntimeFailure, match="local policy server exited with 1"):
        server.wait_ready()
    server.stop()


def test_a_stopped_server_is_reaped_by_exit() -> None:
    server = LocalPolicyServer({}).start()
    pid = server._process.pid
    server.stop()
    local_server._reap_all()  # what the command does as it exits
    assert _gone(pid)


def test_stop_does_not_wait_and_a_server_that_ignores_it_is_killed(monkeypatch) -> None:
    ignores_term = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(120)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", ignores_term], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline() == "ready\n"
    monkeypatch.setattr(local_server, "STOP_TIMEOUT_S", 120.0)
    local_server._stop_in_background(process)
    # Back at once: the process ignored SIGTERM and is killed only after the time-out.
    assert process.poll() is None
    monkeypatch.setattr(local_server, "STOP_TIMEOUT_S", 0.0)
    process.kill()
    local_server._reap_all()
    assert process.returncode is not None and _gone(process.pid)
    process.stdout.close()


def _policy_servers_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gymflow.simulated.policy_server" in argv and str(parent).encode() in argv:
            found.append(int(entry.name))
    return found


def test_no_policy_server_outlives_gym_eval_run(tmp_path: Path, prefect_api: str) -> None:
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    command = [GYM, "eval", "run", "--benchmark", "arithmetic-smoke", "--out", str(tmp_path)]
    run = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    servers: set[int] = set()
    while run.poll() is None:  # the server lives from before collecting until it ends
        servers.update(_policy_servers_of(run.pid))
        time.sleep(0.01)
    stdout, stderr = run.communicate()
    assert run.returncode == 0, stdout.decode() + stderr.decode()
    assert servers, "no local policy server was seen while the run ran"
    assert [pid for pid in servers if not _gone(pid)] == []
