"""The warm process: gymflow and its libraries imported once, a command forked from it for each
`gym` invocation that can use it.

    python -P -m gymflow.launch.warm --home PREFECT_HOME

Started beside the local Prefect server (`gymflow.cli.local_prefect`) with the environment its
caller had; it ends when that server stops, when its code changes on disk, or on SIGTERM. It
serves one user's commands on a Unix socket in a folder only that user can enter.

A command is taken only when forking gives what a fresh process would (`refusal`): the same
Python and import path, the same environment (a library may have read any variable when it was
imported here), the same limits, priority, CPUs, control group and namespaces, the same local
Prefect server, and no imported file changed on
disk since. The command then runs in a child of a supervisor (both forked from here): the
supervisor holds the caller's socket, passes its signals on, SIGTERMs the command if the caller
goes away, and sends the exit code when the command ends. gymflow's own modules under `cli` are
imported afresh by every command (they build the consoles for the caller's terminal), and every
cache in gymflow's modules starts empty (they hold files read from the caller's folder)."""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import gc
import importlib
import io
import json
import os
import selectors
import signal
import socket
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow import warm_protocol as protocol
from gymflow.user_folders import private_folder

#: How often the warm process checks that its local Prefect server still runs.
TICK_S = 1.0
CLI_PACKAGE = "gymflow.cli"
#: Requests are read one at a time: a connection that sends nothing holds the next ones this
#: long (a `gym` caller sends its request as soon as it connects).
REQUEST_TIMEOUT_S = 1.0
#: prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Request:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    executable: str
    path: list[str]
    umask: int
    context: dict[str, Any]
    fds: tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Warm:
    home: Path
    env: dict[str, str]  # the caller's environment, as later commands are compared to it
    path: list[str]
    context: dict[str, Any]  # `warm_protocol.process_context`
    server_pid: int | None  # the local Prefect server it was started beside
    api_url: str | None  # the Prefect API the imported Prefect was set to
    files: dict[str, tuple[int, int]]  # every imported file: (mtime_ns, size)
    recorded: Callable[[], Any]  # `local_prefect.recorded`, kept when `preload` forgot its module

    def gone(self) -> str | None:
        """Why this process should end now, if it should."""
        server = self.recorded()
        if self.server_pid is not None and (server is None or server.pid != self.server_pid):
            return "its local Prefect server stopped"
        return None

    def refusal(self, request: Request) -> tuple[str, bool] | None:
        """Why this command cannot be forked from here (and whether this process is stale and
        should end), or None."""
        if os.path.realpath(request.executable) != os.path.realpath(sys.executable):
            return f"another Python: {request.executable}", False
        if request.path[1:] != self.path:  # [0]: the folder of the `gym` script itself
            return "another import path (sys.path)", False
        theirs = protocol.comparable_env(request.env)
        if theirs != self.env:
            names = sorted(
                k for k in theirs.keys() | self.env.keys() if theirs.get(k) != self.env.get(k)
            )
            return f"environment differs: {', '.join(names[:5])}", False
        if request.context != self.context:
            keys = request.context.keys() | self.context.keys()
            names = sorted(k for k in keys if request.context.get(k) != self.context.get(k))
            return f"process differs: {', '.join(names)}", False
        if not os.path.isdir(request.cwd):
            return "its folder does not exist", False
        changed = changed_file(self.files)
        if changed is not None:
            return f"{changed} changed on disk", True
        if self.gone() is not None or self._api_url(request.env) != self.api_url:
            return "the local Prefect server changed", True
        return None

    def _api_url(self, env: dict[str, str]) -> str | None:
        """The Prefect API a command with this environment would use (`local_prefect.adopt`)."""
        if env.get("PREFECT_API_URL"):
            return env["PREFECT_API_URL"]
        server = self.recorded()
        return server.api_url if server is not None else None


def imported_files() -> dict[str, tuple[int, int]]:
    files = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path:
            with contextlib.suppress(OSError):
                info = os.stat(path)
                files[path] = (info.st_mtime_ns, info.st_size)
    return files


def changed_file(files: dict[str, tuple[int, int]]) -> str | None:
    for path, seen in files.items():
        try:
            info = os.stat(path)
        except OSError:
            return path
        if (info.st_mtime_ns, info.st_size) != seen:
            return path
    return None


def function_imports(folder: Path, package: str) -> set[str]:
    """Modules imported inside functions of `folder`'s modules (the commands import most of
    what they need on first use, so that a command that needs little pays little)."""
    found: set[str] = set()
    for file in folder.glob("*.py"):
        tree = ast.parse(file.read_text(), str(file))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found.update(alias.name for alias in inner.names)
                elif isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
                    found.add(inner.module)
    return {name for name in found if not name.startswith(package)}


def preload() -> Callable[[], Any]:
    """Import every command's modules and what they import on first use, then forget the
    `gymflow.cli` modules themselves (each command imports them afresh). Returns
    `local_prefect.recorded`, which this process keeps using."""
    cli = importlib.import_module(CLI_PACKAGE)
    recorded = importlib.import_module(f"{CLI_PACKAGE}.local_prefect").recorded
    for name in cli.command_modules([]):
        importlib.import_module(f"{CLI_PACKAGE}.{name}")
    for name in sorted(function_imports(Path(cli.__file__).parent, CLI_PACKAGE)):
        with contextlib.suppress(ImportError):  # an optional extra that is not installed
            importlib.import_module(name)
    for name in [m for m in sys.modules if m == CLI_PACKAGE or m.startswith(f"{CLI_PACKAGE}.")]:
        del sys.modules[name]
    return recorded


def log(message: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {message}\n")
    sys.stderr.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    args = parser.parse_args()
    callers = protocol.comparable_env(os.environ)  # before gymflow.cli sets its defaults
    home = args.home.resolve()
    held = _one_per_home(home)
    if held is None:
        return
    recorded = preload()
    # Objects imported here are never collected in a command: a collection would touch (and so
    # copy) every page a command shares with this process.
    gc.freeze()
    server = recorded()
    warm = Warm(
        home=home,
        env=callers,
        path=list(sys.path),
        context=protocol.process_context(),
        server_pid=server.pid if server is not None else None,
        api_url=os.environ.get("PREFECT_API_URL"),
        files=imported_files(),
        recorded=recorded,
    )
    request = serve(warm, held)
    if request is not None:  # this process is a command forked from the warm one
        run(request)


def _one_per_home(home: Path) -> int | None:
    """A lock only one warm process per PREFECT_HOME holds (its file descriptor), or None when
    another holds it."""
    fd = os.open(home / f"{protocol.STATE_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def serve(warm: Warm, held: int) -> Request | None:
    """Serve until this process should end (None); in a forked command, its request. `held`:
    the lock of `_one_per_home`, closed in every forked process."""
    folder = protocol.socket_dir()
    if not private_folder(folder, create=True):
        log(f"{folder} is not a folder only this user can enter: not serving")
        return None
    path = protocol.socket_path(warm.home)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)  # left by a warm process that was killed: we hold the lock
    listener.bind(str(path))
    listener.listen(64)
    owner, bound = os.getpid(), path.stat().st_ino
    state = warm.home / protocol.STATE_FILE
    state.write_text(json.dumps({"pid": owner, "socket": str(path)}))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the supervisors
    signal.signal(signal.SIGTERM, _exit_on_signal)
    log(f"serving {warm.home} on {path} ({len(warm.files)} files imported)")
    try:
        while True:
            ready = selectors.DefaultSelector()
            ready.register(listener, selectors.EVENT_READ)
            events = ready.select(TICK_S)
            ready.close()
            reason = warm.gone()
            if reason is not None:
                log(f"ending: {reason}")
                return None
            if not events:
                continue
            conn, _ = listener.accept()
            outcome = _take(conn, warm, (listener, held))
            if isinstance(outcome, Request):
                return outcome
            if outcome is not None:
                log(f"ending: {outcome}")
                return None
    finally:
        if os.getpid() == owner:
            with contextlib.suppress(OSError):
                if path.stat().st_ino == bound:
                    path.unlink()
            state.unlink(missing_ok=True)


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _take(conn: socket.socket, warm: Warm, kept: tuple[socket.socket, int]) -> Request | str | None:
    """Read one command and fork it, or refuse it. Returns the request in the forked command
    (the supervisor never returns), a reason to end when this process is stale, else None."""
    taken = None
    try:
        taken = _read(conn)
        if taken is not None:
            refused = warm.refusal(taken[0])
            described = " ".join(taken[0].argv[1:])
    except (OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        # A request of the wrong shape (not from `gym`) must leave this process serving.
        log(f"dropped a request: {exc}")
        if taken is not None:
            _close(taken[0].fds)
        taken = None
    if taken is None:
        conn.close()
        return None
    request, lines = taken
    if refused is not None or os.fork():  # refused, or forked: the warm process goes on
        if refused is not None:
            log(f"refused {described!r}: {refused[0]}")
            with contextlib.suppress(OSError):
                protocol.send(conn, {"refused": refused[0]})
        _close(request.fds)
        conn.close()
        return refused[0] if refused is not None and refused[1] else None
    kept[0].close()
    os.close(kept[1])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if not _confirmed(conn, lines):
        log(f"the caller of {' '.join(request.argv[1:])!r} stopped waiting: it runs it itself")
        os._exit(0)
    supervisor = os.getpid()
    runner = os.fork()
    if runner == 0:
        conn.close()
        _end_with(supervisor)
        return request
    _close(request.fds)
    _supervise(conn, lines, runner, request.argv)


def _end_with(supervisor: int) -> None:
    """SIGTERM this command when its supervisor dies (killed): its caller then says the command
    was lost and exits, and the command must not go on in the caller's terminal unseen."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _confirmed(conn: socket.socket, lines: protocol.Lines) -> bool:
    """Whether the caller still waits for this command (it answers `taken` with `go`). A caller
    that timed out runs the command itself: starting it here too would run it twice."""
    try:
        protocol.send(conn, {"taken": True})
        answer = lines.next()
    except (OSError, ValueError):
        return False
    return bool(answer and answer.get("go") is True)


def _read(conn: socket.socket) -> tuple[Request, protocol.Lines] | None:
    conn.settimeout(REQUEST_TIMEOUT_S)
    if protocol.peer_uid(conn) != os.getuid():
        return None
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    lines = protocol.Lines(conn)
    lines.buffer = data
    try:
        message = lines.next()
        if message is None or len(fds) != 3:
            _close(fds)
            return None
        return Request(**message, fds=(fds[0], fds[1], fds[2])), lines
    except BaseException:  # not a request: the descriptors it came with are not kept
        _close(fds)
        raise


def _close(fds: Any) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _supervise(conn: socket.socket, lines: protocol.Lines, runner: int, argv: list[str]) -> None:
    """In the supervisor: pass the caller's signals on to the command, SIGTERM it if the caller
    goes away, send its exit code when it ends. Never returns."""
    code = 3
    try:
        conn.settimeout(None)
        protocol.send(conn, {"pid": runner})
        watch = selectors.DefaultSelector()
        ended = os.pidfd_open(runner)
        watch.register(ended, selectors.EVENT_READ)
        watch.register(conn, selectors.EVENT_READ)
        caller = True
        while True:
            for key, _ in watch.select():
                if key.fileobj == ended:
                    code = os.waitstatus_to_exitcode(os.waitpid(runner, 0)[1])
                    ended_by = {"killed": -code} if code < 0 else {}  # the caller dies so too
                    code = 128 - code if code < 0 else code  # killed by a signal: as a shell says
                    log(f"served {' '.join(argv[1:])!r} in pid {runner}: exit {code}")
                    if caller:
                        with contextlib.suppress(OSError):
                            protocol.send(conn, {"exit": code, **ended_by})
                    os._exit(0)
                message = lines.next() if caller else None
                if message is None:  # the caller is gone: stop the command as SIGTERM would
                    caller = False
                    watch.unregister(conn)
                    log(f"the caller of pid {runner} went away: SIGTERM")
                    os.kill(runner, signal.SIGTERM)
                elif message.get("signal") in protocol.FORWARDED_SIGNALS:
                    os.kill(runner, int(message["signal"]))
    except BaseException as exc:  # the supervisor must never return into the serving loop
        log(f"supervisor of pid {runner} failed: {exc!r}")
        os._exit(code)


def run(request: Request) -> None:
    """In the forked command: become the caller's process (its terminal, folder, environment,
    arguments), forget what was read for an earlier folder, and run the command."""
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
    _close(fd for fd in request.fds if fd > 2)
    unbuffered = bool(request.env.get("PYTHONUNBUFFERED"))  # as Python reads it at start
    sys.stdin = _stream(sys.stdin, 0, "r")
    sys.stdout = _stream(sys.stdout, 1, "w", unbuffered=unbuffered)
    sys.stderr = _stream(sys.stderr, 2, "w", unbuffered=unbuffered, line_buffering=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    os.chdir(request.cwd)
    os.umask(request.umask)
    os.environ.clear()
    os.environ.update(request.env)
    sys.argv = list(request.argv)
    sys.modules["__main__"] = _script(request.argv[0])
    sys.path[:] = request.path
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    importlib.invalidate_caches()
    _forget_caches()
    _reseed()
    cli = importlib.import_module(CLI_PACKAGE)  # sets Prefect's defaults and server, as here
    _refresh_prefect()
    cli.main()


def _script(path: str) -> types.ModuleType:
    """The `gym` script as `__main__`, as in a process of its own: click names the program
    after it (`Usage: gym ...`), not after this module (`python -m gymflow.launch.gym`)."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    return main


def _stream(
    old: Any, fd: int, mode: str, *, unbuffered: bool = False, line_buffering: bool | None = None
) -> Any:
    """A new text stream on `fd`, buffered as Python buffers it for a fresh process: by line on
    a terminal (and always for stderr), not at all under PYTHONUNBUFFERED."""
    raw = io.FileIO(fd, mode, closefd=False)
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=old.encoding, errors=old.errors)
    if line_buffering is None:
        line_buffering = os.isatty(fd)
    return io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw), encoding=old.encoding, errors=old.errors,
        line_buffering=line_buffering, write_through=unbuffered,
    )  # fmt: skip


def _forget_caches() -> None:
    """Empty every functools cache in gymflow's modules (environment folders and benchmark
    files read for the warm process's own folder, or an earlier command's)."""
    for name, module in list(sys.modules.items()):
        if name == "gymflow" or name.startswith("gymflow."):
            for value in list(vars(module).values()):
                clear = getattr(value, "cache_clear", None)
                if callable(clear):
                    clear()


def _refresh_prefect() -> None:
    """Prefect read its settings and built its log handlers (for the warm process's stderr,
    not a terminal) when it was imported: read and build them again for this command."""
    from prefect.context import refresh_global_settings_context
    from prefect.logging.configuration import setup_logging

    refresh_global_settings_context()
    setup_logging(incremental=False)


def _reseed() -> None:
    """A fork copies the random state: reseed what Python does not reseed itself on fork."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


if __name__ == "__main__":
    main()
