"""The test run's reaper: a process of its own, started by tests/conftest.py when a pytest run
begins, that waits for that pytest process to end, however it ends (a clean exit, SIGTERM from a
timeout, SIGKILL, Ctrl-C), and then stops every process the run left behind.

What the run started is found without its help, because a killed runner tells nobody: conftest
puts a token in the environment (`GYMFLOW_TEST_RUN`) before pytest starts its workers, so every
process the run starts inherits it (Prefect servers, model servers, llama.cpp, LiteLLM, NeMo
Gym, `gym` commands and their policy servers), in a session of its own or not, orphaned or not.
A process whose environment was replaced is found as a descendant, or a member of the process
group or session, of one that carries the token. They get SIGTERM, then SIGKILL after a grace
period; a process is only signalled while its start time is the one it was found with (no pid
reuse), and the scan repeats until it finds nothing (a server stopping may start a child).

    python tests/reaper.py PID TOKEN
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

VARIABLE = "GYMFLOW_TEST_RUN"
GRACE_S = 10.0
ROUNDS = 5


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    session: int
    started: int  # clock ticks after boot: with the pid, names one process


def stat(pid: int) -> Proc | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses
    fields = text[text.rindex(")") + 2 :].split()
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def _carries(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def started_with(entry: str, *, exclude: int) -> list[Proc]:
    """Every live process whose environment holds `entry` (NAME=VALUE), and (to a fixed point)
    the children, process-group and session members of what was found."""
    marker = entry.encode()
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != exclude:
            proc = stat(int(name))
            if proc is not None and not _zombie(proc.pid):
                procs[proc.pid] = proc
    found = {pid for pid in procs if _carries(pid, marker)}
    while True:
        grown = {
            proc.pid
            for proc in procs.values()
            if proc.pid not in found
            and (proc.ppid in found or proc.pgrp in found or proc.session in found)
        }
        if not grown:
            return [procs[pid] for pid in found]
        found |= grown


def left_behind(token: str, *, exclude: int) -> list[Proc]:
    """Every live process the run with `token` started."""
    return started_with(f"{VARIABLE}={token}", exclude=exclude)


def send(proc: Proc, signum: int) -> None:
    current = stat(proc.pid)
    if current is not None and current.started == proc.started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)


def alive(proc: Proc) -> bool:
    current = stat(proc.pid)
    return current is not None and current.started == proc.started and not _zombie(proc.pid)


def _zombie(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2] == "Z"


def reap(token: str, *, grace_s: float = GRACE_S) -> int:
    """Stop what the run left behind; the number of processes signalled."""
    signalled = 0
    for _ in range(ROUNDS):
        procs = left_behind(token, exclude=os.getpid())
        if not procs:
            break
        signalled += len(procs)
        for proc in procs:
            send(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for proc in procs:
            send(proc, signal.SIGKILL)
    return signalled


def wait_for_exit(pid: int) -> None:
    """Block until process `pid` has ended (a pidfd: no polling, no pid reuse)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def main() -> None:
    pid, token = int(sys.argv[1]), sys.argv[2]
    # Ctrl-C and a closed terminal are for the run, not for the one who cleans up after it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wait_for_exit(pid)
    reap(token)


if __name__ == "__main__":
    main()
