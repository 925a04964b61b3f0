"""Run untrusted Python in a sandboxed subprocess.

The program runs under bubblewrap in fresh network, PID, IPC and UTS namespaces, sees only a
read-only /usr and Python installation plus a size-limited private /tmp, and runs as an unprivileged
user id with resource limits on wall time, CPU time, address space, process count and file size.

Why these choices: CI runs as root, and root ignores RLIMIT_NPROC, so when we are root the program
runs under a user id of its own (one per sandbox slot and process, so a fork bomb in one sandbox
never eats another's process budget); `setpriv` switches to it inside the namespaces, after
bubblewrap has bind-mounted an interpreter that may live under a root-only directory. The PID
namespace means the program cannot see or signal anything outside it, and killing bubblewrap
takes every process in it down.

An outcome of the program (it timed out, ran out of memory, raised) is a `SandboxResult`; a
failure of the sandbox itself (bubblewrap missing or unable to start) is a `SandboxError`."""

from __future__ import annotations

import json
import math
import os
import queue
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Exit status of bubblewrap when its child died of signal N is 128 + N.
_SIGNAL_EXIT = 128
#: Sandbox user ids live far above any real account: base + (pid % 4096) * 64 + slot.
_UID_BASE = 1_000_000
_SLOT_SPAN = 64
_TAIL_CHARS = 2000

# Runs inside the sandbox: reads a nonce from stdin, executes the program, and reports how it ended
# on one line prefixed by the nonce. A program that exits early (os._exit, a signal) leaves no
# report, so an early exit or a printed fake never reads as a clean finish. (The nonce is a local
# of the runner's frame: this stops accidents and casual cheating, not a program that walks the
# interpreter's frames; the namespaces and limits, not the nonce, are the security boundary.)
_RUNNER = r"""
def main():
    import json, os, sys
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    os.close(0)
    with open(sys.argv[1]) as f:
        source = f.read()
    os.write(1, (nonce + " started\n").encode())
    try:
        exec(compile(source, "solution.py", "exec"), {"__name__": "__main__"})
    except BaseException as exc:
        outcome = {"status": "raised", "type": type(exc).__name__, "message": str(exc)[:500],
                   "errno": getattr(exc, "errno", None), "line": None}
        tb, lines = exc.__traceback__, source.splitlines()
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "solution.py" and 0 < tb.tb_lineno <= len(lines):
                outcome["line"] = lines[tb.tb_lineno - 1].strip()[:300]
            tb = tb.tb_next
    else:
        outcome = {"status": "ok"}
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    import resource
    usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    outcome["cpu_s"] = round(sum(u.ru_utime + u.ru_stime for u in usage), 4)
    os.write(1, (nonce + " " + json.dumps(outcome) + "\n").encode())
main()
"""


class SandboxError(RuntimeError):
    """The sandbox itself failed: the program's behaviour is unknown, not wrong."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    timeout_s: float = 5.0
    memory_mb: int = 512
    max_processes: int = 16
    max_file_mb: int = 16
    tmp_mb: int = 32


@dataclass(slots=True)
class SandboxResult:
    """How the program ended.

    `reason` is `ok`, `timeout`, `memory`, `file_size`, `disk_full`, `process_limit`, `network`,
    `read_only_filesystem`, `permission_denied`, `exited` (it exited before finishing),
    `exception` (it raised something else; see `error_type`) or `killed` (a signal ended it)."""

    reason: str
    exit_code: int | None
    wall_s: float
    cpu_s: float | None = None  # the program's CPU time, when it lived to report it
    limit: str | None = None  # for a timeout: "wall_clock" or "cpu" (a busy machine slows wall)
    error_type: str | None = None
    error_message: str | None = None
    error_line: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "wall_s": round(self.wall_s, 3)}
        if self.cpu_s is not None:
            out["cpu_s"] = self.cpu_s
        if self.limit:
            out["limit"] = self.limit
        if self.error_type:
            out["error_type"] = self.error_type
        if self.error_message:
            out["error_message"] = self.error_message
        if self.error_line:
            out["error_line"] = self.error_line
        if self.stderr_tail and not self.ok:
            out["stderr"] = self.stderr_tail
        return out


# -- slots: bounded concurrency and one user id per concurrent sandbox ---------------------------
_slots: queue.Queue[int] | None = None
_slots_lock = threading.Lock()


def pool_size() -> int:
    """Sandboxes that may run at once: one per core."""
    return os.cpu_count() or 1


def _slot_queue() -> queue.Queue[int]:
    global _slots
    with _slots_lock:  # the first verifications arrive on several threads at once
        if _slots is None:
            slots: queue.Queue[int] = queue.Queue()
            for slot in range(min(pool_size(), _SLOT_SPAN)):
                slots.put(slot)
            _slots = slots
        return _slots


@contextmanager
def _slot() -> Iterator[int]:
    slots = _slot_queue()
    slot = slots.get()
    try:
        yield slot
    finally:
        slots.put(slot)


def _sandbox_uid(slot: int) -> int:
    return _UID_BASE + (os.getpid() % 4096) * _SLOT_SPAN + slot


# -- the command ---------------------------------------------------------------------------------
def _interpreter() -> tuple[Path, list[Path]]:
    """The real interpreter (not a venv shim) and the directories it needs beyond /usr."""
    executable = Path(sys.executable).resolve()
    binds = []
    for path in {Path(sys.base_prefix).resolve(), executable.parent.parent}:
        if not path.is_relative_to("/usr"):
            binds.append(path)
    return executable, sorted(binds)


def _user_process_count(uid: int) -> int:
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("Uid:"):
                    count += int(line.split()[1]) == uid
                    break
        except (OSError, ValueError, IndexError):
            continue
    return count


def _command(bwrap: str, job: Path, limits: SandboxLimits, uid: int | None) -> list[str]:
    python, binds = _interpreter()
    cmd = [
        bwrap,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("lib", "lib64", "bin", "sbin"):
        if Path(f"/usr/{name}").exists():
            cmd += ["--symlink", f"usr/{name}", f"/{name}"]
    # bwrap creates missing parents of a mount point as 0700 root: make them traversable.
    for parent in sorted({a for path in binds for a in path.parents if a != Path("/")}):
        cmd += ["--perms", "0755", "--dir", str(parent)]
    for path in binds:
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--perms", "0755", "--dir", "/job"]
    cmd += ["--ro-bind", str(job / "solution.py"), "/job/solution.py"]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp"]
    cmd += ["--chdir", "/tmp", "--clearenv"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    if uid is None:
        cmd += ["--unshare-user", "--disable-userns"]
    else:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd += [
            setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
        ]
    cmd += [str(python), "-S", "-s", "-B", "-c", _RUNNER, "/job/solution.py"]
    return cmd


def _limit_resources(limits: SandboxLimits, process_budget: int) -> None:
    """Runs in the child between fork and exec; the limits pass on to everything it starts."""
    cpu = math.ceil(limits.timeout_s)
    memory = limits.memory_mb << 20
    file_size = limits.max_file_mb << 20
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_NPROC, (process_budget, process_budget))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


# -- running -------------------------------------------------------------------------------------
def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; the code sandbox needs it "
            "(Debian: apt-get install bubblewrap)"
        )
    return path


def run_python(source: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `source` as a Python program in the sandbox; blocks until it ends or times out.

    At most `pool_size()` programs run at once across all threads of this process."""
    limits = limits or SandboxLimits()
    bwrap = bwrap_path()
    with _slot() as slot, tempfile.TemporaryDirectory(prefix="gymflow-sandbox-") as tmp:
        job = Path(tmp)
        job.chmod(0o755)
        (job / "solution.py").write_text(source)
        (job / "solution.py").chmod(0o644)
        if os.geteuid() == 0:
            uid: int | None = _sandbox_uid(slot)
            budget = limits.max_processes
        else:
            # Without root the program keeps our user id, whose other processes count too.
            uid, budget = None, _user_process_count(os.geteuid()) + limits.max_processes
        return _execute(_command(bwrap, job, limits, uid), job, limits, budget)


def _execute(cmd: list[str], job: Path, limits: SandboxLimits, budget: int) -> SandboxResult:
    nonce = secrets.token_hex(16)
    started = time.perf_counter()
    with open(job / "stdout", "wb") as out, open(job / "stderr", "wb") as err:
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=lambda: _limit_resources(limits, budget),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start bubblewrap: {exc}") from None
        timed_out = False
        try:
            proc.stdin.write(f"{nonce}\n".encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once; its exit status and stderr say why
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.perf_counter() - started
    stdout = (job / "stdout").read_bytes().decode(errors="replace")
    stderr = (job / "stderr").read_bytes().decode(errors="replace")
    return _classify(nonce, proc.returncode, timed_out, wall, stdout, stderr)


def _classify(
    nonce: str, code: int, timed_out: bool, wall: float, stdout: str, stderr: str
) -> SandboxResult:
    started, report = False, None
    kept: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith(nonce):
            kept.append(line)
        elif line[len(nonce) + 1 :] == "started":
            started = True
        elif report is None or report["status"] == "ok":
            # Forked children finish the program too: any unclean finish decides the outcome.
            report = json.loads(line[len(nonce) + 1 :])
    result = SandboxResult(
        reason="killed",
        exit_code=code,
        wall_s=wall,
        stdout_tail="\n".join(kept)[-_TAIL_CHARS:],
        stderr_tail=stderr[-_TAIL_CHARS:],
    )
    if timed_out or code == _SIGNAL_EXIT + signal.SIGXCPU:
        result.reason, result.limit = "timeout", "wall_clock" if timed_out else "cpu"
        return result
    if not started:
        raise SandboxError(f"sandbox did not start (exit {code}): {stderr.strip()[-500:]}")
    if report is None:
        if code == _SIGNAL_EXIT + signal.SIGXFSZ:
            result.reason = "file_size"
        elif code == 0:
            result.reason = "exited"
        return result
    result.cpu_s = report.get("cpu_s")
    if report["status"] == "ok":
        result.reason = "ok"
        return result
    result.error_type, result.error_message = report["type"], report["message"]
    result.error_line = report.get("line")
    result.reason = _reason_for(report["type"], report.get("errno"))
    return result


# errno values (Linux) that name a sandbox limit the program ran into.
_ERRNO_REASONS = {
    11: "process_limit",  # EAGAIN from fork at RLIMIT_NPROC
    27: "file_size",  # EFBIG at RLIMIT_FSIZE
    28: "disk_full",  # ENOSPC on the size-limited /tmp
    30: "read_only_filesystem",  # EROFS
    13: "permission_denied",  # EACCES
    1: "permission_denied",  # EPERM
    97: "network",  # EAFNOSUPPORT
    99: "network",  # EADDRNOTAVAIL
    101: "network",  # ENETUNREACH
    111: "network",  # ECONNREFUSED
    113: "network",  # EHOSTUNREACH
}
_TYPE_REASONS = {"MemoryError": "memory", "SystemExit": "exited", "gaierror": "network"}


def _reason_for(error_type: str, errno: int | None) -> str:
    if error_type in _TYPE_REASONS:
        return _TYPE_REASONS[error_type]
    if errno is not None and errno in _ERRNO_REASONS:
        return _ERRNO_REASONS[errno]
    return "exception"
