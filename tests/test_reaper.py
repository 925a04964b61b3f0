"""However a test run ends, the servers it started end with it (tests/reaper.py): a pytest run of
tests/reaper_probe.py starts servers the ways the suite does (a real `prefect server start` from
the `prefect_api` fixture among them), is killed as a timeout, a kill -9 or Ctrl-C would, and
nothing it started may still be running a minute later."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import reaper
from tests.servers import as_a_new_job

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("reaper_probe.py")
#: the probe's servers include a Prefect server, which a loaded machine starts slowly
READY_TIMEOUT_S = 240
GONE_TIMEOUT_S = 180  # a loaded machine (load 15-20) took longer than 60 s to wind down


def _describe(procs: list[reaper.Proc]) -> str:
    lines = []
    for proc in procs:
        try:
            command = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            command = b"?"
        lines.append(f"{proc.pid}: {command.decode(errors='replace')[:200]}")
    return "\n".join(lines)


def _wait_ready(process: subprocess.Popen, folder: Path, names: list[str], log: Path) -> list[int]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all((folder / f"{name}.pids").exists() for name in names):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the probe run did not get ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return [int(pid) for name in names for pid in (folder / f"{name}.pids").read_text().split()]


@pytest.mark.parametrize(
    ("how", "workers", "prefect"),
    [
        pytest.param("SIGKILL", 2, True, marks=pytest.mark.prefect, id="kill-9-xdist-prefect"),
        pytest.param("SIGTERM", 2, True, marks=pytest.mark.prefect, id="timeout-xdist-prefect"),
        pytest.param("SIGINT", 0, False, id="ctrl-c"),
    ],
)
def test_a_killed_run_leaves_no_server(tmp_path: Path, how: str, workers: int, prefect: bool):
    mark = f"GYMFLOW_PROBE_MARK={secrets.token_hex(8)}"
    env = {**os.environ, "GYMFLOW_PROBE_DIR": str(tmp_path), mark.split("=")[0]: mark.split("=")[1]}
    if prefect:
        env["GYMFLOW_PROBE_PREFECT"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PROBE)]
    if workers:
        command += ["-n", str(workers)]
    log = tmp_path / "probe.log"
    with log.open("wb") as out:
        # a session of its own, as a terminal's job is: Ctrl-C reaches its whole group
        run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True,
                               preexec_fn=as_a_new_job)  # fmt: skip
    try:
        started = _wait_ready(run, tmp_path, ["kinds", "prefect"] if prefect else ["kinds"], log)
        # everything the probe run is made of, found before it is killed
        before = reaper.started_with(mark, exclude=os.getpid())
        pids = {proc.pid for proc in before}
        assert set(started) <= pids, _describe(before)
        commands = _describe(before)
        if prefect:
            assert "prefect server start" in commands, commands
        if how == "SIGINT":
            os.killpg(run.pid, signal.SIGINT)
        else:
            os.kill(run.pid, getattr(signal, how))  # the runner alone: its workers are not told
        run.wait(timeout=GONE_TIMEOUT_S)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while True:
            left = [proc for proc in before if reaper.alive(proc)]
            left += [p for p in reaper.started_with(mark, exclude=os.getpid()) if p.pid not in pids]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not left, f"still running {GONE_TIMEOUT_S} s after {how}:\n{_describe(left)}"
    finally:
        for proc in reaper.started_with(mark, exclude=os.getpid()):
            reaper.send(proc, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
            run.wait()
