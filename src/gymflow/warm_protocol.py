"""What the `gym` command and the warm process (`gymflow.launch`) say to each other, where
they meet, and the files that name the warm process under PREFECT_HOME.

The standard library only: every `gym` command imports this before anything else, and one that
runs without the warm process must not pay for it."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Set by the shell for its own bookkeeping, different in every folder or subshell, or read
#: only by the `gym` script itself (GYMFLOW_WARM); nothing gymflow or its libraries read at
#: import. Every other variable must be equal, or the command runs in its own process: a
#: library may have read it when the warm process imported it.
VOLATILE_ENV = frozenset({"PWD", "OLDPWD", "_", "SHLVL", "COLUMNS", "LINES", "GYMFLOW_WARM"})
#: Limits a forked command would otherwise inherit from the warm process rather than its caller.
LIMITS = ("RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_CPU",
          "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE")  # fmt: skip
#: Namespaces a caller may have entered (`unshare`, a container) that the warm process is not in.
NAMESPACES = ("mnt", "net", "pid", "user", "ipc", "uts", "cgroup")
#: The lines of /proc/self/status that say what a process may do.
PRIVILEGES = ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:")
#: The signals a caller passes on to the command the warm process runs for it (Ctrl-Z stops
#: the caller, and the command with SIGSTOP; `fg` or `bg` continue both).
FORWARDED_SIGNALS = frozenset(
    {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGSTOP, signal.SIGCONT}
)
#: `off`: a command neither uses nor starts a warm process.
MODE_ENV = "GYMFLOW_WARM"
#: Under PREFECT_HOME: the warm process's pid (while it serves), and its log.
STATE_FILE = "gymflow-warm.json"
LOG_FILE = "gymflow-warm.log"
#: Started by module name: the CLI that starts it does not import what it runs.
MODULE = "gymflow.launch.warm"


def prefect_home(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """Prefect's home folder as Prefect would find it (without importing Prefect)."""
    return Path(environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser().resolve()


def socket_dir() -> Path:
    """A folder only this user can enter: /tmp/gymflow-<uid> (a socket's path must stay under
    108 bytes, which a PREFECT_HOME deep in a temporary folder would not)."""
    return Path(tempfile.gettempdir()) / f"gymflow-{os.getuid()}"


def socket_path(home: Path) -> Path:
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:24]
    return socket_dir() / f"{digest}.sock"


def comparable_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {key: value for key, value in environ.items() if key not in VOLATILE_ENV}


def process_context() -> dict[str, object]:
    """What a process inherits besides its environment, which a command forked from the warm
    process would take from it instead of from its caller: limits (`ulimit`), priority
    (`nice`), CPUs (`taskset`), control group (`systemd-run`), namespaces, groups,
    privileges."""
    context: dict[str, object] = {
        name: list(resource.getrlimit(getattr(resource, name))) for name in LIMITS
    }
    context["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    context["cpus"] = sorted(os.sched_getaffinity(0))
    context["groups"] = [os.getgid(), os.getegid(), *sorted(os.getgroups())]
    context["cgroup"] = _read("/proc/self/cgroup")
    context["privileges"] = _privileges()
    # `choom`, systemd's OOMScoreAdjust: which process the kernel kills first when memory runs out
    context["oom_score_adj"] = _read("/proc/self/oom_score_adj")
    for name in NAMESPACES:
        context[f"ns_{name}"] = _readlink(f"/proc/self/ns/{name}")
    return context


def _privileges() -> list[str]:
    """Capabilities, no_new_privs and seccomp (`setpriv`, `capsh`, a sandbox): a command forked
    from the warm process would run with its privileges, not its caller's fewer."""
    status = _read("/proc/self/status") or ""
    return [line for line in status.splitlines() if line.startswith(PRIVILEGES)]


def _read(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (Linux SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


class Lines:
    """JSON messages, one per line, read from a socket."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def next(self) -> dict[str, Any] | None:
        """The next message; None when the other end closed."""
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)
