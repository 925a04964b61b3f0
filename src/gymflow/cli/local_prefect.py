"""One local Prefect server that every `gym` command reuses.

Without PREFECT_API_URL every command starts Prefect's ephemeral server: about 2 s importing the
server, 3–4 s waiting for it, and the run history goes with it. A background `prefect server
start` on 127.0.0.1 pays that once; its address is kept under PREFECT_HOME, and each later
command (of the same PREFECT_HOME) uses it while its process lives. An explicit PREFECT_API_URL
always wins. `gym server --start` starts it, `--stop` stops it; a command that runs a flow on a
terminal starts it on first use, and says so (GYMFLOW_LOCAL_PREFECT, `for_run`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gymflow import warm_protocol
from gymflow.errors import RuntimeFailure, UserError
from gymflow.processes import answers_ok, pid_alive

STATE_FILE = "gymflow-local-server.json"
STARTUP_TIMEOUT_S = 180.0
#: `auto` (the default): a command that runs a flow starts the local server on first use when it
#: runs on a terminal, not in scripts, CI or tests, which would leave one running behind them;
#: `on`: off a terminal too; `off`: never (an ephemeral server per command, unless
#: `gym server --start` ran).
MODE_ENV = "GYMFLOW_LOCAL_PREFECT"


@dataclass(frozen=True, slots=True)
class LocalServer:
    api_url: str
    pid: int
    log: str


prefect_home = warm_protocol.prefect_home


def recorded() -> LocalServer | None:
    """The local server recorded under PREFECT_HOME, if its process still runs."""
    try:
        server = LocalServer(**json.loads((prefect_home() / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return server if pid_alive(server.pid) else None


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
#: The variables this process set itself (DEFAULTS, an adopted server's address), with the
#: value each had before (None: unset): the warm process is started with the environment as the
#: user had it, which later commands are compared to (`gymflow.launch`).
_set_here: dict[str, str | None] = {}


def _set(name: str, value: str) -> None:
    _set_here.setdefault(name, os.environ.get(name))
    os.environ[name] = value


def configure() -> None:
    """Before Prefect is imported: gymflow's defaults, and the local server if one runs."""
    for name, value in DEFAULTS.items():
        if name not in os.environ:
            _set(name, value)
    adopt()


def users_env() -> dict[str, str]:
    """This process's environment as it was before gymflow set anything in it."""
    env = {key: value for key, value in os.environ.items() if key not in _set_here}
    return env | {key: value for key, value in _set_here.items() if value is not None}


def adopt() -> str | None:
    """Point this process at the recorded local server, unless PREFECT_API_URL is set."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    server = recorded()
    if server is not None:
        _set("PREFECT_API_URL", server.api_url)
        return server.api_url
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def for_run(*, on_terminal: bool) -> LocalServer | None:
    """Before a command that runs a flow imports Prefect: the local server it will use, started
    now if none runs and GYMFLOW_LOCAL_PREFECT allows it (None: PREFECT_API_URL decides, or an
    ephemeral server). Raises UserError for an unknown mode, RuntimeFailure when the server would
    not start."""
    if os.environ.get("PREFECT_API_URL") and "PREFECT_API_URL" not in _set_here:
        return None  # the user's own
    mode = os.environ.get(MODE_ENV, "auto")
    if mode not in ("auto", "on", "off"):
        raise UserError(f"{MODE_ENV}={mode!r}: use auto, on or off")
    starts = mode == "on" or (mode == "auto" and on_terminal)
    if "PREFECT_API_URL" in _set_here:  # adopted from a running local server
        if starts:
            start_warm()  # again, if it ended (when gymflow's code changed on disk)
        return None
    if not starts:
        return None
    server = start()
    _set("PREFECT_API_URL", server.api_url)
    return server


def start() -> LocalServer:
    """Start `prefect server start` on 127.0.0.1 in the background (its own session, so it
    outlives this command), wait until it answers, and record it. Reuses a running one; two
    commands starting one at once get the same (a lock under PREFECT_HOME)."""
    home = prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    with (home / "gymflow-local-server.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server = recorded() or _start(home)
    start_warm()
    return server


def warm_pid() -> int | None:
    """The warm process serving this PREFECT_HOME, if one runs (`gymflow.launch`)."""
    try:
        pid = int(json.loads((prefect_home() / warm_protocol.STATE_FILE).read_text())["pid"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return pid if pid_alive(pid) else None


def start_warm() -> None:
    """Start the warm process beside the local server, unless one runs or GYMFLOW_WARM=off: it
    imports gymflow and Prefect once, in the background, and later commands fork from it. It is
    given the environment as the user had it: a command is forked only when its own is the
    same."""
    home = prefect_home()
    if os.environ.get(warm_protocol.MODE_ENV) == "off" or warm_pid() is not None:
        return
    command = [sys.executable, "-P", "-m", warm_protocol.MODULE, "--home", str(home)]
    with (home / warm_protocol.LOG_FILE).open("ab") as out:
        subprocess.Popen(
            command, cwd=home, env=users_env(), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _start(home: Path) -> LocalServer:
    port = _free_port()
    log = home / "gymflow-local-server.log"
    prefect = str(Path(sys.executable).parent / "prefect")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    server = LocalServer(f"http://127.0.0.1:{port}/api", process.pid, str(log))
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not answers_ok(f"{server.api_url}/health", timeout=2):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_pid(process.pid)
            raise RuntimeFailure(f"the local Prefect server did not start; its log: {log}")
        time.sleep(0.25)
    (home / STATE_FILE).write_text(json.dumps(asdict(server)))
    return server


def _stop_pid(pid: int) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after 20 s."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while pid_alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        if not pid_alive(pid):
            return


def stop() -> LocalServer | None:
    """Stop the warm process and the recorded local server (if any) and forget them."""
    warm = warm_pid()
    if warm is not None:
        os.kill(warm, signal.SIGTERM)
    server = recorded()
    (prefect_home() / STATE_FILE).unlink(missing_ok=True)
    if server is not None:
        _stop_pid(server.pid)
    return server
