"""The kernel's count of out-of-memory kills, as evidence of why a process died by SIGKILL.

A verifier worker that the host's OOM killer, or the OOM killer of the cgroup gymflow runs in (a
container's or a systemd slice's memory limit), ends dies by SIGKILL and leaves no message.
SIGKILL alone is no evidence: an operator's `kill -9` sends it too. The kernel counts each OOM
kill in the victim's memory cgroup and its ancestors, whichever limit (the host's or a cgroup's)
ran out (v2 `memory.events`, v1 `memory.oom_control`: 1 us to read), and host-wide in
/proc/vmstat (`oom_kill`, 60 us to read: used only for a process in the root cgroup, which the
kernel does not count in). A count taken before a job and found higher after its worker died by
SIGKILL says the OOM killer ended a process of this cgroup then; the count cannot say which, so
a kill of another process in the cgroup at that moment reads the same."""

from __future__ import annotations

import functools
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_KEY = b"oom_kill "


def _own_cgroup_counter() -> Path | None:
    """This process's memory cgroup's OOM-kill counter, None in the root cgroup or without one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.strip().lstrip("/")
        if not relative:
            continue
        if controllers == "":  # cgroup v2
            file = CGROUP_ROOT / relative / "memory.events"
        elif "memory" in controllers.split(","):  # cgroup v1
            file = CGROUP_ROOT / "memory" / relative / "memory.oom_control"
        else:
            continue
        if file.is_file():
            return file
    return None


@functools.cache
def _counter_fd() -> int | None:
    """An open counter file, read again with pread for each count (None: none readable)."""
    for file in (_own_cgroup_counter(), Path("/proc/vmstat")):
        if file is not None:
            try:
                return os.open(file, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
    return None


def oom_kills() -> int | None:
    """The OOM kills counted so far, or None when this host counts none we can read: only a
    change between two counts means anything."""
    fd = _counter_fd()
    if fd is None:
        return None
    try:
        text = os.pread(fd, 1 << 16, 0)
    except OSError:
        return None
    start = text.find(_KEY)
    if start < 0 or (start and text[start - 1 : start] != b"\n"):
        return None
    value = text[start + len(_KEY) :].split(b"\n", 1)[0].strip()
    return int(value) if value.isdigit() else None


def killed_since(before: int | None) -> bool:
    """Whether the OOM killer struck since `before` (a count from `oom_kills`)."""
    after = oom_kills()
    return before is not None and after is not None and after > before
