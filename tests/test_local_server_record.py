"""The local Prefect server's record under PREFECT_HOME cannot be fooled: a pid that now names
another process is never used nor signalled, a server that does not answer is not used, files
are never written through a link planted there, and another user's PREFECT_HOME is refused.
(tests/flows/test_local_server.py starts a real server.)"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from gymflow.cli import exit_codes, local_prefect
from gymflow.cli.local_prefect import STATE_FILE, LocalServer, Recorded
from gymflow.core.errors import UserError
from gymflow.simulated.local_server import free_port
from tests.conftest import gym


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process of this user, leading its own process group as a server would."""
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    # Popen returns once the child is forked, maybe before it runs `sleep`: its identity read
    # then would be the forked Python's command line, another process's once `sleep` starts
    deadline = time.monotonic() + 30
    while (local_prefect.identity(process.pid) or (0, []))[1] != ["sleep", "600"]:
        assert time.monotonic() < deadline, "sleep did not start"
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def _record(home: Path, prefect: Recorded, reports: Recorded | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    server = LocalServer(prefect, reports or prefect, str(home), str(home / "log"))
    (home / STATE_FILE).write_text(json.dumps(asdict(server)))


def _server_cmdline(port: int) -> list[str]:
    return [
        "python",
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def _env(home: Path) -> dict[str, str]:
    return {"PREFECT_HOME": str(home), "PREFECT_API_URL": ""}


@pytest.mark.parametrize("reused", ["command line", "start time"])
def test_a_reused_pid_is_discarded_and_never_signalled(tmp_path, sleeper, reused) -> None:
    home = tmp_path / "home"
    started, cmdline = local_prefect.identity(sleeper.pid)
    port = free_port()
    if reused == "command line":  # the pid now runs something else
        stale = Recorded(
            sleeper.pid, started, _server_cmdline(port), f"http://127.0.0.1:{port}/api"
        )
    else:  # the same command line, started at another time: another process
        stale = Recorded(sleeper.pid, started - 1, cmdline, f"http://127.0.0.1:{port}/api")
    _record(home, stale)
    told = gym("server", cwd=tmp_path, env=_env(home), check=True)
    assert "Traceback" not in told.stderr
    (note,) = told.stderr.splitlines()
    assert f"pid {sleeper.pid} is now another process" in note and "removed the record" in note
    assert "ephemeral mode" in told.stdout  # not pointed at the stale address
    assert not (home / STATE_FILE).exists()
    _record(home, stale)
    stopped = gym("server", "--stop", cwd=tmp_path, env=_env(home), check=True)
    assert "no local Prefect server was running" in stopped.stdout
    assert "Traceback" not in stopped.stderr
    assert sleeper.poll() is None, "gym server --stop signalled a process it did not start"
    assert not (home / STATE_FILE).exists()


def test_a_run_ignores_a_stale_record(tmp_path, sleeper, monkeypatch, capsys) -> None:
    """What `gym eval run` does before importing Prefect: a stale record leaves
    PREFECT_API_URL unset (an ephemeral server) with one line, not a traceback at the run."""
    home = tmp_path / "home"
    started, _ = local_prefect.identity(sleeper.pid)
    _record(home, Recorded(sleeper.pid, started, _server_cmdline(1), "http://127.0.0.1:1/api"))
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv(local_prefect.MODE_ENV, "auto")
    assert local_prefect.for_run(on_terminal=False) is None
    assert "PREFECT_API_URL" not in os.environ
    (note,) = capsys.readouterr().err.splitlines()
    assert f"pid {sleeper.pid} is now another process" in note


def test_a_recorded_server_that_does_not_answer_is_not_used_but_stopped(tmp_path, sleeper) -> None:
    home = tmp_path / "home"
    started, cmdline = local_prefect.identity(sleeper.pid)
    port = free_port()  # nothing listens there
    _record(home, Recorded(sleeper.pid, started, cmdline, f"http://127.0.0.1:{port}/api"))
    told = gym("server", cwd=tmp_path, env=_env(home), check=True)
    (note,) = told.stderr.splitlines()
    assert f"(pid {sleeper.pid}) does not answer" in note and "gym server --stop" in note
    assert "ephemeral mode" in told.stdout
    assert (home / STATE_FILE).exists()  # kept: it is ours to stop
    stopped = gym("server", "--stop", cwd=tmp_path, env=_env(home), check=True)
    assert "stopped the local Prefect server" in stopped.stdout
    assert sleeper.wait(timeout=30) is not None  # the recorded process, and only it, ended
    assert not (home / STATE_FILE).exists()


def test_files_under_prefect_home_are_never_written_through_a_link(tmp_path) -> None:
    target = tmp_path / "root-only"
    target.write_text("precious")
    home = tmp_path / "home"
    home.mkdir()
    link = home / STATE_FILE
    link.symlink_to(target)
    local_prefect.write_file(link, b"{}")
    assert target.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "{}"
    log = home / local_prefect.LOG_FILE
    log.symlink_to(target)
    with pytest.raises(UserError, match="is a symbolic link"):
        local_prefect.open_log(log)
    assert target.read_text() == "precious"
    assert sorted(p.name for p in home.iterdir()) == sorted([STATE_FILE, log.name])  # no leftovers
    # a record planted as a link is neither read through nor followed by `gym server --stop`
    link.unlink()
    link.symlink_to(target)
    stopped = gym("server", "--stop", cwd=tmp_path, env=_env(home), check=True)
    assert "no local Prefect server was running" in stopped.stdout
    assert target.read_text() == "precious" and not link.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_another_users_prefect_home_is_refused(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 12345, 12345)
    for args in (("server", "--start"), ("server", "--stop"),
                 ("eval", "run", "--benchmark", "arithmetic-smoke", "--out", "r")):  # fmt: skip
        result = gym(*args, cwd=tmp_path, env=_env(home))
        assert result.returncode == exit_codes.BAD_INPUT, result.stderr
        (line,) = result.stderr.splitlines()
        assert f"PREFECT_HOME {home} belongs to uid 12345" in line, line
    assert list(home.iterdir()) == []
    assert not (tmp_path / "r").exists()


def test_a_server_is_recorded_as_the_command_it_runs_not_its_exec(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Popen returns once the child's `execve` has closed its close-on-exec files, before the
    new image's command line is laid out: /proc shows none then. A record read in that window
    held an empty command line, and every later command took the live server for another
    process (a CI run under load ran its flows without the report server). Here /proc shows
    none for the first three reads."""
    real, seen = local_prefect.identity, []

    def mid_exec(pid: int) -> tuple[int, list[str]] | None:
        found = real(pid)
        seen.append(pid)
        if pid == sleeper.pid and found is not None and seen.count(pid) <= 3:
            return found[0], []
        return found

    monkeypatch.setattr(local_prefect, "identity", mid_exec)
    record = local_prefect._recorded(sleeper, "http://127.0.0.1:1")
    assert record.cmdline == ["sleep", "600"] and seen.count(sleeper.pid) == 4, (record, seen)
    monkeypatch.undo()
    assert record.why_not() is None
