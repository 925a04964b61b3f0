"""One local Prefect server, and a report server beside it, that every `gym` command reuses.

Without PREFECT_API_URL every command starts Prefect's ephemeral server: about 2 s importing the
server, 3–4 s waiting for it, and the run history goes with it. A background `prefect server
start` on 127.0.0.1 pays that once; `gym serve reports` beside it makes the report link each run
leaves in the Prefect UI an http URL (a browser refuses a file path from a web page). Both are
recorded under PREFECT_HOME, and each later command of that PREFECT_HOME that runs a flow uses
them while they are the processes recorded. An explicit PREFECT_API_URL (GYMFLOW_REPORTS_URL)
always wins. `gym server --start` starts them, `--stop` stops them; a command that runs a flow
on a terminal starts them on first use, and says so (GYMFLOW_LOCAL_PREFECT, `for_run`).

The record cannot be fooled by what outlives it: it names each process by pid, start time (from
/proc, in clock ticks since boot) and command line, and the URL it serves. A pid that now
belongs to another process is never used nor signalled, a server that does not answer is not
used (`gym server --stop` stops it); the command says so in one line. Under PREFECT_HOME,
files are written beside their name and renamed over it, and logs opened, without following a
link someone planted there, and a PREFECT_HOME that belongs to another user is refused (as
root, it would be theirs to plant links in)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from gymflow.core.errors import RuntimeFailure, UserError
from gymflow.core.processes import answers_ok, child_env

STATE_FILE = "gymflow-local-server.json"
LOCK_FILE = "gymflow-local-server.lock"
LOG_FILE = "gymflow-local-server.log"
REPORTS_LOG_FILE = "gymflow-reports-server.log"
STARTUP_TIMEOUT_S = 180.0
#: `auto` (the default): a command that runs a flow starts the local server on first use when it
#: runs on a terminal, not in scripts, CI or tests, which would leave one running behind them;
#: `on`: off a terminal too; `off`: never (an ephemeral server per command, unless
#: `gym server --start` ran).
MODE_ENV = "GYMFLOW_LOCAL_PREFECT"


@dataclass(frozen=True, slots=True)
class Recorded:
    """A background process as recorded when it started: its pid, its start time in clock
    ticks since boot (/proc/PID/stat, field 22) and its command line, which together name it
    whatever later reuses the pid; and the URL it serves."""

    pid: int
    started: int
    cmdline: list[str]
    url: str

    def why_not(self) -> str | None:
        """Why the process running under this pid now is not the one recorded (None: it is)."""
        found = identity(self.pid)
        if found is None:
            return f"pid {self.pid} has ended"
        if found != (self.started, self.cmdline):
            return f"pid {self.pid} is now another process"
        return None


@dataclass(frozen=True, slots=True)
class LocalServer:
    """The local Prefect server (`prefect.url` is its API URL) and the report server beside it
    (serving `reports_root`)."""

    prefect: Recorded
    reports: Recorded
    reports_root: str
    log: str

    @property
    def api_url(self) -> str:
        return self.prefect.url


def identity(pid: int) -> tuple[int, list[str]] | None:
    """(start time, command line) of this user's process `pid`; None if there is none."""
    proc = Path(f"/proc/{pid}")
    try:
        if proc.stat().st_uid != os.getuid():
            return None
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count from its closing one
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # ended, not yet reaped by its parent
        return None
    return int(fields[19]), [arg.decode(errors="replace") for arg in cmdline.split(b"\0")[:-1]]


def prefect_home() -> Path:
    """Prefect's home folder as Prefect would find it (without importing Prefect)."""
    raw = os.environ.get("PREFECT_HOME") or Path.home() / ".prefect"
    return Path(raw).expanduser().resolve()


def own_home() -> Path:
    """PREFECT_HOME, made (mode 0700) if missing. Raises UserError when it belongs to another
    user: root writing into it would follow the links that user can plant there."""
    home = prefect_home()
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        owner = home.stat().st_uid
    except OSError as exc:
        raise UserError(f"PREFECT_HOME {home}: {exc.strerror}") from None
    if owner != os.getuid():
        raise UserError(
            f"PREFECT_HOME {home} belongs to uid {owner}, not to this user (uid {os.getuid()}): "
            "set PREFECT_HOME to a folder of your own"
        )
    return home


def write_file(path: Path, data: bytes) -> None:
    """Write `path` whole without following a link at it: a new file beside it (O_EXCL |
    O_NOFOLLOW, mode 0600), renamed over the name, which replaces a link rather than its
    target."""
    aside = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(aside, path)
    except BaseException:
        aside.unlink(missing_ok=True)
        raise


def _open(path: Path, flags: int) -> int:
    """`path` opened with O_NOFOLLOW; UserError when a link is there (someone planted it, or a
    user who means it: either way it is theirs to remove, not ours to write through)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{path} is a symbolic link: gymflow does not write through one "
                            "under PREFECT_HOME; remove it") from None  # fmt: skip
        raise


def open_log(path: Path) -> int:
    """A log under PREFECT_HOME opened for appending, never through a link."""
    return _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def _note(message: str) -> None:
    sys.stderr.write(f"note: {message}\n")


def _read_record(home: Path) -> LocalServer | None:
    try:
        fd = os.open(home / STATE_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as file:
            data = json.load(file)
        return LocalServer(
            prefect=Recorded(**data["prefect"]),
            reports=Recorded(**data["reports"]),
            reports_root=str(data["reports_root"]),
            log=str(data["log"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        (home / STATE_FILE).unlink(missing_ok=True)
        _note(f"removed an unreadable local server record {home / STATE_FILE} ({exc})")
        return None


def recorded(home: Path) -> LocalServer | None:
    """The local server recorded under `home`, if its Prefect server is the process recorded
    and answers. A record whose process is gone or another is removed, one that does not answer
    is not used (`gym server --stop` still stops it), each with one line on stderr."""
    server = _read_record(home)
    if server is None:
        return None
    why = server.prefect.why_not()
    if why is not None:
        (home / STATE_FILE).unlink(missing_ok=True)
        _note(
            f"the local Prefect server recorded in {home / STATE_FILE} is gone ({why}): "
            "removed the record"
        )
        return None
    if not answers_ok(f"{server.api_url}/health", timeout=2):
        _note(
            f"the local Prefect server (pid {server.prefect.pid}) does not answer at "
            f"{server.api_url}: not using it (`gym server --stop` stops it)"
        )
        return None
    return server


#: Prefect settings gymflow changes unless the user set them.
DEFAULTS = {
    # Prefect's INFO logs would bury the progress bar; the Prefect UI still has the run.
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # The machines gymflow runs on are often offline; telemetry would only log a failure.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # Prefect gives its ephemeral server 20 s to start; a first run (database migrations) on a
    # busy 2-core machine took longer and failed with "Timed out while attempting to connect".
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}


def configure() -> None:
    """Before Prefect is imported: gymflow's defaults for what the user did not set."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)


def _use(server: LocalServer) -> None:
    """Point this process's flows at `server`, and their report links at its report server
    (unless the user points them elsewhere)."""
    # imported here, not with this module: Starlette comes with it
    from gymflow.reports.serving import REPORTS_ROOT_ENV, REPORTS_URL_ENV

    os.environ["PREFECT_API_URL"] = server.api_url
    if os.environ.get(REPORTS_URL_ENV):
        return
    why = server.reports.why_not()
    if why is not None:
        _note(
            f"the report server recorded beside the local Prefect server is gone ({why}): "
            "report links are file paths until `gym server --start` starts it again"
        )
        return
    os.environ[REPORTS_URL_ENV] = server.reports.url
    os.environ[REPORTS_ROOT_ENV] = server.reports_root


def adopt() -> LocalServer | None:
    """Point this process at the recorded local server, unless PREFECT_API_URL is set."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    server = recorded(own_home())
    if server is not None:
        _use(server)
    return server


def for_run(*, on_terminal: bool) -> LocalServer | None:
    """Before a command that runs a flow imports Prefect: the local server it will use, adopted,
    or started now if none runs and GYMFLOW_LOCAL_PREFECT allows it. Returns the server when
    it was started now (None: PREFECT_API_URL decides, an adopted server, or an ephemeral
    server). Raises UserError for an unknown mode or a PREFECT_HOME of another user,
    RuntimeFailure when the server would not start."""
    mode = os.environ.get(MODE_ENV, "auto")
    if mode not in ("auto", "on", "off"):
        raise UserError(f"{MODE_ENV}={mode!r}: use auto, on or off")
    own_home()
    if os.environ.get("PREFECT_API_URL"):
        return None  # the user's own
    if mode == "on" or (mode == "auto" and on_terminal):
        server, started = start()
        _use(server)
        return server if started else None
    adopt()
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """One `gym` at a time starts or stops the local server of `home`."""
    fd = _open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def start(reports_root: Path | None = None) -> tuple[LocalServer, bool]:
    """The local server of this PREFECT_HOME, and whether it was started now: a recorded one
    that answers is reused (its report server started again if it ended); else `prefect
    server start` and `gym serve reports --root REPORTS_ROOT` (default: the working folder)
    start on 127.0.0.1 in the background (their own sessions, so they outlive this command),
    and are recorded once the Prefect server answers."""
    home = own_home()
    root = str((reports_root or Path.cwd()).resolve())
    with _locked(home):
        server = recorded(home)
        if server is not None:
            if server.reports.why_not() is None:
                return server, False
            server = LocalServer(server.prefect, _start_reports(home, server.reports_root),
                                 server.reports_root, server.log)  # fmt: skip
            write_file(home / STATE_FILE, json.dumps(asdict(server)).encode())
            return server, True
        _stop_recorded(home)  # one that does not answer
        log = home / LOG_FILE
        port = _free_port()
        command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                   "--port", str(port)]  # fmt: skip
        process = _spawn(command, log)
        api_url = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not answers_ok(f"{api_url}/health", timeout=2):
            if process.poll() is not None or time.monotonic() > deadline:
                _end(process.pid, process)
                raise RuntimeFailure(f"the local Prefect server did not start; its log: {log}")
            time.sleep(0.25)
        server = LocalServer(_recorded(process, api_url), _start_reports(home, root), root,
                             str(log))  # fmt: skip
        write_file(home / STATE_FILE, json.dumps(asdict(server)).encode())
    return server, True


def _server_env() -> dict[str, str]:
    """What a background server is given of this command's environment (`child_env`): what
    Python needs to find gymflow, Prefect's and gymflow's settings; not the keys and tokens of
    the shell that happened to start it, which a server would otherwise hold for as long as it
    runs, nor the API URL this command may have been pointed at."""
    env = child_env(prefixes=("PREFECT_", "GYMFLOW_"))
    env.pop("PREFECT_API_URL", None)
    return env


def _spawn(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = open_log(log)
    try:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=_server_env(), cwd=log.parent,
                                start_new_session=True)  # fmt: skip
    finally:
        os.close(out)


def _recorded(process: subprocess.Popen[bytes], url: str) -> Recorded:
    """The record of `process` (its start time and command line) once it runs its own command:
    read while it is still this process's fork, or inside its `execve`, /proc shows this
    process's command line or none, and every later command took the server for another
    process and ran without it (a CI run at load 4: report links were file paths)."""
    ours, deadline = identity(os.getpid()), time.monotonic() + 30
    while True:
        found = identity(process.pid)
        if found is None:
            raise RuntimeFailure(f"a local server process ended as it started ({process.args})")
        if found[1] and (ours is None or found[1] != ours[1]):
            return Recorded(process.pid, found[0], found[1], url)
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"a local server process did not start in 30 s ({process.args})")
        time.sleep(0.01)


def _start_reports(home: Path, root: str) -> Recorded:
    """`gym serve reports` over `root`, on a free port of 127.0.0.1. Not waited for: it listens
    well before the Prefect server beside it answers, and a link is opened later still."""
    port = _free_port()
    command = [sys.executable, "-m", "gymflow.cli", "serve", "reports", "--root", root,
               "--port", str(port)]  # fmt: skip
    process = _spawn(command, home / REPORTS_LOG_FILE)
    return _recorded(process, f"http://127.0.0.1:{port}")


def _end(pid: int, child: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the process group `pid` leads, then SIGKILL what is left after 20 s. Only for a
    process this command started or whose identity it has just checked."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) != pid:  # not a group leader: never signal the group it is in
            return
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                return
            if child is None and identity(pid) is None:
                return
            time.sleep(0.1)


def _stop_recorded(home: Path) -> LocalServer | None:
    """Stop the processes of the record under `home` that are still the ones recorded, and
    remove the record; the server recorded, if its Prefect server was stopped."""
    server = _read_record(home)
    if server is None:
        return None
    stopped = False
    for name, process in (("Prefect server", server.prefect), ("report server", server.reports)):
        why = process.why_not()
        if why is None:
            _end(process.pid)
            stopped = stopped or process is server.prefect
        else:
            _note(f"the local {name} recorded in {home / STATE_FILE} is gone ({why}): "
                  "nothing to stop")  # fmt: skip
    (home / STATE_FILE).unlink(missing_ok=True)
    return server if stopped else None


def stop() -> LocalServer | None:
    """Stop the recorded local server and its report server (if they are still the processes
    recorded) and forget them; the server recorded, if any."""
    home = own_home()
    with _locked(home):
        return _stop_recorded(home)
