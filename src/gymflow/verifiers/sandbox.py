"""Run untrusted Python in a sandboxed process that can hand back nothing but plain data.

A `Sandbox` starts the candidate's module in its own process and lets the trusted caller call its
functions: each call's arguments go in and its return value comes back as JSON-encoded plain
values (gymflow.verifiers.sandbox_runner), decoded without pickle into built-in types only, one
bounded line each way. Whatever the candidate does to its own interpreter, all that reaches this
process is a value per call; the tests that judge those values run here.

The process runs under bubblewrap in fresh network, PID, IPC and UTS namespaces, sees only a
read-only /usr and Python installation (site-packages hidden: no dataset, no answer key) plus a
size-limited private /tmp, and runs under rlimits on CPU time, address space, process count and
file size; the wall clock is bounded here. Where this host lets us make a memory cgroup (v1 or v2),
every sandbox gets one, limited to `memory_mb`: an address-space rlimit is per process and does not
see memory held as files (memfd_create, /dev/shm, the tmpfs /tmp), which a program spread over its
processes held to 900 MiB under a 512 MiB limit; the cgroup counts pages however they are held.
Its user may not create user namespaces (bubblewrap's `--disable-userns`), so it cannot become
root in one and mount its way past the limits.

Why two bubblewraps: the program runs under a user id of its own (root ignores RLIMIT_NPROC, and
an owner's id would let it read what the owner owns among what the root shows; one id per sandbox
slot and process as root, so a fork bomb in one sandbox never eats another's process budget). The
outer bubblewrap, as root, builds the file system (the interpreter may live under a root-only
directory); `setpriv` drops to that user id; an inner bubblewrap, as that user, creates the user
namespace that `--disable-userns` needs. Without root the same runs as root of a user namespace
of the owner's subordinate ids (`sandbox_host.sandbox_user`); where the host has none, one
bubblewrap does both and the program keeps the owner's id.

Every sandbox's scratch folder is named after its owner's pid and removed when the sandbox closes;
`sandbox_host.sweep_orphans` removes those a killed owner left. A failure of the sandbox itself
(bubblewrap missing or unable to start) is a `SandboxError`; how the candidate's process ended is
a `SandboxEnded`."""

from __future__ import annotations

import functools
import json
import marshal
import math
import os
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.core.errors import RuntimeFailure
from gymflow.core.processes import child_env
from gymflow.core.trees import remove_tree
from gymflow.verifiers.sandbox_host import (
    SCRATCH_PREFIX,
    held_slot,
    memory_cgroups,
    sandbox_uid,
    sandbox_user,
)
from gymflow.verifiers.sandbox_runner import MAX_MESSAGE, OutOfTime, Unsupported, decode

#: Exit status of bubblewrap when its child died of signal N is 128 + N.
_SIGNAL_EXIT = 128
_TAIL_CHARS = 2000
_RUNNER = Path(__file__).with_name("sandbox_runner.py")


class SandboxError(RuntimeFailure):
    """The sandbox itself failed: the program's behaviour is unknown, not wrong."""


class CandidateRaised(Exception):
    """A call into the candidate (or loading its module) raised; `info` is the runner's report:
    type, message, errno, the solution's line."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(f"{info.get('type')}: {info.get('message')}")
        self.info = info


class SandboxEnded(BaseException):
    """The candidate's process is gone (a limit, an exit, a kill), so no call can return.
    A BaseException, so test code's `except Exception` cannot swallow it."""

    def __init__(self, reason: str, *, limit: str | None = None, exit_code: int | None = None):
        super().__init__(reason)
        self.reason, self.limit, self.exit_code = reason, limit, exit_code


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    timeout_s: float = 5.0
    memory_mb: int = 512
    max_processes: int = 16
    max_file_mb: int = 16
    tmp_mb: int = 32


# -- the command ---------------------------------------------------------------------------------
@functools.cache
def _interpreter() -> tuple[Path, list[Path], list[Path]]:
    """The real interpreter (not a venv shim), the directories it needs beyond /usr, and the
    site-packages directories to hide (installed packages, the dataset among them)."""
    import site
    import sysconfig

    executable = Path(sys.executable).resolve()
    binds = []
    for path in {Path(sys.base_prefix).resolve(), executable.parent.parent}:
        if not path.is_relative_to("/usr"):
            binds.append(path)
    visible = [Path("/usr"), *binds]
    paths = sysconfig.get_paths()
    candidates = {*site.getsitepackages(), paths["purelib"], paths["platlib"]}
    candidates |= {str(p) for p in Path("/usr/lib").glob("python3*/dist-packages")}
    candidates |= {str(p) for p in Path("/usr/local/lib").glob("python3*/dist-packages")}
    hidden = sorted(
        path
        for path in (Path(c).resolve() for c in candidates)
        if path.is_dir() and any(path.is_relative_to(v) for v in visible)
    )
    return executable, sorted(binds), hidden


def user_process_count(uid: int) -> int:
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
    python, binds, hidden = _interpreter()
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
        *system_root(binds),
    ]
    for path in hidden:
        cmd += ["--tmpfs", str(path), "--remount-ro", str(path)]
    cmd += ["--perms", "0755", "--dir", "/job"]
    cmd += ["--ro-bind", str(_RUNNER), "/job/runner.py"]
    cmd += ["--ro-bind", str(job / "solution.py"), "/job/solution.py"]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp"]
    cmd += ["--chdir", "/tmp", "--clearenv"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    cmd += as_user(bwrap, uid, "/tmp")
    cmd += [str(python), "-I", "-S", "-B", "/job/runner.py", "/job/solution.py"]
    return cmd


#: Top-level folders that a merged /usr makes links into it (an older layout, folders of their own).
_SYSTEM_FOLDERS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def system_root(binds: Iterable[Path] = ()) -> list[str]:
    """bubblewrap arguments for a root that shows the system's programs (/usr, and /bin, /lib...
    as the host has them) and `binds` (absolute, resolved), read-only, and nothing else of the
    host: what is not named is not there at all, rather than there read-only. The code sandbox and
    the workspace sandbox both build their roots with it. A bind under /usr or under another bind
    is shown already and left out."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_FOLDERS:
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    shown = [Path("/usr"), *(Path("/", name) for name in _SYSTEM_FOLDERS)]
    wanted = sorted(set(binds))
    kept = [
        path
        for path in wanted
        if not any(path.is_relative_to(other) for other in shown)
        and not any(path != other and path.is_relative_to(other) for other in wanted)
    ]
    # bwrap creates missing parents of a mount point as 0700 root: make them traversable.
    for parent in sorted({a for path in kept for a in path.parents if a != Path("/")}):
        argv += ["--perms", "0755", "--dir", str(parent)]
    for path in kept:
        argv += ["--ro-bind", str(path), str(path)]
    return argv


def as_user(bwrap: str, uid: int | None, chdir: str) -> list[str]:
    """The end of an outer bubblewrap command that runs what follows it as `uid` (None: our own
    user) in a user namespace it may not nest (`--disable-userns`); see the module docstring for
    why a caller with an id to give needs the second bubblewrap."""
    no_userns = ["--unshare-user", "--disable-userns", "--assert-userns-disabled"]
    if uid is None:
        return no_userns
    setpriv = _which("setpriv") or "/usr/bin/setpriv"
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        bwrap,
        *no_userns,
        "--dev-bind",
        "/",
        "/",
        "--die-with-parent",
        "--chdir",
        chdir,
    ]


def _limit_resources(limits: SandboxLimits, process_budget: int, group: Path | None) -> None:
    """Runs in the child between fork and exec; the limits pass on to everything it starts."""
    if group is not None:
        (group / "cgroup.procs").write_text(str(os.getpid()))
    cpu = math.ceil(limits.timeout_s)
    memory = limits.memory_mb << 20
    file_size = limits.max_file_mb << 20
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_NPROC, (process_budget, process_budget))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@functools.lru_cache(maxsize=8)
def _which_cached(name: str, search_path: str | None) -> str | None:
    return shutil.which(name, path=search_path)


def _which(name: str) -> str | None:
    """`shutil.which`, remembered per PATH (it stats every PATH entry: a millisecond a run)."""
    return _which_cached(name, os.environ.get("PATH"))


def bwrap_path() -> str:
    path = _which("bwrap")
    if path is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; the code sandbox needs it "
            "(Debian: apt-get install bubblewrap)"
        )
    return path


def _tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and everything under it, read from the kernel (not reported by the
    candidate): the sandbox's processes live in a PID namespace whose CPU never reaches our
    rusage. Live processes count their own time exactly, reaped ones at clock-tick resolution.
    `pid` itself is left out: it is our child, and its time reaches our rusage when reaped."""
    nanoseconds, ticks, pending = 0, 0, [pid]
    while pending:
        current = pending.pop()
        proc = Path(f"/proc/{current}")
        try:
            if current != pid:
                nanoseconds += int((proc / "schedstat").read_text().split()[0])
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(stat[13]) + int(stat[14])  # cutime, cstime
            children = (proc / "task" / str(current) / "children").read_text().split()
            pending += [int(child) for child in children]
        except (OSError, ValueError, IndexError):
            continue
    return nanoseconds / 1e9 + ticks / os.sysconf("SC_CLK_TCK")


def _ready(fd: int, event: int, seconds: float) -> bool:
    """Whether `fd` is ready for `event` (or hung up) within `seconds`. poll, not select: a
    process with many sockets open (a collector) has descriptors past select's 1024."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(1, math.ceil(seconds * 1000))))


# -- the sandbox ---------------------------------------------------------------------------------
class Sandbox:
    """One candidate module in its own sandboxed process, for as long as the `with` block:

        with Sandbox(source, limits) as box:
            box.load()                      # runs the module; raises CandidateRaised
            box.call("f", 1, [2, 3])        # a plain value, or CandidateRaised / SandboxEnded

    `evidence` lists what the candidate was seen doing to the harness (see sandbox_runner);
    `cpu_s` is the sandbox's CPU time, read from the kernel as it closes."""

    def __init__(self, source: str, limits: SandboxLimits | None = None) -> None:
        self.source = source
        self.limits = limits or SandboxLimits()
        self.evidence: list[str] = []
        self.ended: SandboxEnded | None = None
        self.cpu_s: float | None = None
        self.output_tail = ""
        self._calls = 0

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        bwrap = bwrap_path()
        self._slot = held_slot()
        slot = self._slot.__enter__()
        self._proc: subprocess.Popen[bytes] | None = None
        self._fds: list[int] = []
        self._group: Path | None = None
        try:
            self._scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        except BaseException:
            self._slot.__exit__(None, None, None)
            raise
        try:
            self._start(bwrap, slot)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _start(self, bwrap: str, slot: int) -> None:
        self._scratch.chmod(0o755)
        solution = self._scratch / "solution.py"
        solution.write_text(self.source)
        solution.chmod(0o644)
        user = sandbox_user(sandbox_uid(slot))
        budget = self.limits.max_processes
        if os.geteuid() != 0:
            # Without root our user id's other processes count too: the budget is set before
            # the user namespace is made, and the namespace charges its processes to us.
            budget += user_process_count(os.geteuid())
        cmd = [*user.namespace, *_command(bwrap, self._scratch, self.limits, user.uid)]
        self._cgroups = memory_cgroups()
        if self._cgroups is not None:
            self._group = self._cgroups.make(self._scratch.name, self.limits.memory_mb << 20)
        group = self._group
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        self._fds = [self._request_w, self._reply_r]
        self._buffer, self._scanned = bytearray(), 0
        self._token = secrets.token_hex(16).encode()
        try:
            with open(self._scratch / "output", "wb") as output:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=request_r,
                    stdout=reply_w,
                    stderr=output,
                    start_new_session=True,
                    preexec_fn=lambda: _limit_resources(self.limits, budget, group),
                    env=child_env(),  # what runs inside is given its own (--clearenv)
                )
        except OSError as exc:
            raise SandboxError(f"cannot start bubblewrap: {exc}") from None
        finally:
            os.close(request_r)
            os.close(reply_w)
        os.set_blocking(self._request_w, False)
        self._deadline = time.monotonic() + self.limits.timeout_s
        self._send(self._token + b"\n")
        try:
            self._receive(lambda m: m.get("started") is True)
        except SandboxEnded as ended:
            if ended.reason != "timeout":
                raise SandboxError(
                    f"sandbox did not start (exit {ended.exit_code}): {self._output()[-500:]}"
                ) from None
            raise

    def _close(self) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                if self.ended is None:
                    self.cpu_s = round(_tree_cpu(proc.pid), 4)
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if self._group is not None and self._cgroups is not None:
            self._cgroups.remove(self._group)
        for fd in self._fds:
            with suppress(OSError):
                os.close(fd)
        self._fds = []
        self.output_tail = self._output()[-_TAIL_CHARS:]
        with suppress(OSError):  # sweep_orphans takes what stays
            remove_tree(self._scratch)
        self._slot.__exit__(None, None, None)

    def _output(self) -> str:
        try:
            return (
                (self._scratch / "output").read_bytes()[-8 * _TAIL_CHARS :].decode(errors="replace")
            )
        except OSError:
            return ""

    # -- calls ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Wait for the candidate's module to finish loading; raises what it raised."""
        message = self._receive(lambda m: "loaded" in m)
        if message["loaded"] is not True:
            self._raise(message)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the candidate's `name` with plain-data arguments; returns a plain value."""
        self._calls += 1
        call_id = self._calls
        try:
            request = marshal.dumps((call_id, name, args, kwargs))
        except ValueError as exc:
            raise SandboxError(f"a test passed an argument with no plain form: {exc}") from None
        self._send(len(request).to_bytes(4, "big") + request)
        reply = self._receive(lambda m: m.get("id") == call_id)
        if "value" in reply:
            try:
                # Under the program's own deadline: building the value is the program's time.
                return decode(reply["value"], self._deadline, time.monotonic)
            except OutOfTime:
                raise self._end("timeout", limit="wall_clock") from None
            except (Unsupported, RecursionError) as exc:
                self._saw(f"forged_reply:{exc}")
                raise self._end("tampering") from None
        if "unsupported" in reply:
            message = _utf8(reply["unsupported"])
            raise CandidateRaised({"type": "UnsupportedValue", "message": message})
        self._raise(reply)

    def function(self, name: str) -> Callable[..., Any]:
        """A stand-in for the candidate's function `name`, to hand to trusted test code."""

        def candidate(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, *args, **kwargs)

        candidate.__name__ = name
        return candidate

    def _raise(self, reply: dict[str, Any]) -> None:
        """Raise what the candidate raised, as the runner reported it."""
        if not isinstance(reply.get("raised"), str):
            self._saw("forged_reply:a failure without its report")
            raise self._end("tampering")
        info = {key: _utf8(reply.get(key)) for key in ("message", "errno", "line", "exit_code")}
        info["type"] = _utf8(reply["raised"])
        if info["type"] == "SystemExit":
            if info.get("exit_code") in (0, None):
                self._saw("ended_early:SystemExit(0)")
            raise self._end("exited", exit_code=info.get("exit_code"))
        raise CandidateRaised(info)

    # -- the pipes -----------------------------------------------------------------------------
    def _saw(self, what: str) -> None:
        what = _utf8(what)
        if what not in self.evidence:
            self.evidence.append(what)

    def _end(self, reason: str, *, limit: str | None = None, exit_code: int | None = None):
        """Stop the process, remember how it ended, and return the exception to raise."""
        if self.ended is None:
            assert self._proc is not None
            if self._proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            self.ended = SandboxEnded(reason, limit=limit, exit_code=exit_code)
        return self.ended

    def _ended_by_exit(self) -> SandboxEnded:
        """The reply pipe closed: classify how the process ended (waiting out the deadline for a
        process that closed its pipe but lives on)."""
        assert self._proc is not None
        try:
            code = self._proc.wait(max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._saw("closed_reply_channel")
            return self._end("timeout", limit="wall_clock")
        if code == _SIGNAL_EXIT + signal.SIGXCPU:
            return self._end("timeout", limit="cpu", exit_code=code)
        if code == _SIGNAL_EXIT + signal.SIGXFSZ:
            return self._end("file_size", exit_code=code)
        if self._group is not None and self._cgroups and self._cgroups.oom_killed(self._group):
            return self._end("memory", limit="memory", exit_code=code)
        if code == 0:
            # The runner exits only when we close its pipe: a clean exit mid-test is the
            # candidate ending the test phase the way a finished run would.
            self._saw("ended_early:exit status 0")
            return self._end("exited", exit_code=code)
        if code > _SIGNAL_EXIT:
            return self._end("killed", exit_code=code)
        return self._end("exited", exit_code=code)

    def _send(self, data: bytes) -> None:
        if self.ended is not None:
            raise self.ended
        view = memoryview(data)
        while view:
            left = self._deadline - time.monotonic()
            if left <= 0 or not _ready(self._request_w, select.POLLOUT, left):
                raise self._end("timeout", limit="wall_clock")
            try:
                view = view[os.write(self._request_w, view) :]
            except BrokenPipeError:
                raise self._ended_by_exit() from None

    def _receive(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next message `wanted` accepts; evidence on the way is recorded, and a line not
        from the runner (no token, not JSON, an unexpected reply) is evidence too."""
        if self.ended is not None:
            raise self.ended
        prefix = self._token + b" "
        while True:
            line = self._line()
            if not line.startswith(prefix):
                self._saw("forged_reply:a line without the runner's token")
                continue
            try:
                message = json.loads(line[len(prefix) :])
            except (ValueError, RecursionError):
                message = None
            if not isinstance(message, dict):
                self._saw("forged_reply:not a message")
                continue
            seen = message.get("seen")
            if isinstance(seen, str):
                self._saw(seen[:300])
            elif wanted(message):
                return message
            else:
                self._saw("forged_reply:an unexpected message")

    def _line(self) -> bytes:
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > MAX_MESSAGE:
                self._saw(f"forged_reply:a line over {MAX_MESSAGE >> 20} MiB")
                raise self._end("tampering")
            left = self._deadline - time.monotonic()
            if left <= 0 or not _ready(self._reply_r, select.POLLIN, left):
                raise self._end("timeout", limit="wall_clock")
            chunk = os.read(self._reply_r, 1 << 20)
            if not chunk:
                raise self._ended_by_exit()
            self._buffer += chunk


def _utf8(value: Any) -> Any:
    """Text the candidate wrote, made storable: JSON's `\\ud800` decodes to a lone surrogate,
    which no UTF-8 store or report takes (a candidate raising ValueError('\\ud800') stopped a
    reverify with a TypeError). Returned values are left as they are: they are compared."""
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


# errno values (Linux) that name a sandbox limit the program ran into.
_ERRNO_REASONS = {
    11: "process_limit",  # EAGAIN from fork at RLIMIT_NPROC
    12: "memory",  # ENOMEM from mmap at RLIMIT_AS
    27: "file_size",  # EFBIG at RLIMIT_FSIZE
    28: "disk_full",  # ENOSPC on the size-limited /tmp (or a user namespace refused)
    30: "read_only_filesystem",  # EROFS
    13: "permission_denied",  # EACCES
    1: "permission_denied",  # EPERM
    97: "network",  # EAFNOSUPPORT
    99: "network",  # EADDRNOTAVAIL
    101: "network",  # ENETUNREACH
    111: "network",  # ECONNREFUSED
    113: "network",  # EHOSTUNREACH
}
_TYPE_REASONS = {
    "MemoryError": "memory",
    "gaierror": "network",
    "UnsupportedValue": "unsupported_value",
}


def reason_for(info: dict[str, Any]) -> str | None:
    """The sandbox limit a raised exception names (`memory`, `network`...), if any."""
    error_type, errno = info.get("type"), info.get("errno")
    if error_type in _TYPE_REASONS:
        return _TYPE_REASONS[error_type]
    return _ERRNO_REASONS.get(errno) if isinstance(errno, int) else None
