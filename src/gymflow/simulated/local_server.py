"""Starting and stopping the local policy server as a child process on 127.0.0.1.

A separate process, not a thread: the server and the rollout collector each get a core, and the
server's work never holds the collector's GIL.

Stopping does not wait for the process to end (0.2 s of uvicorn's shutdown, which the run spent
idle): a thread reaps it in the background, and the command waits for whatever is left of that at
exit, so no server outlives the command that started it."""

from __future__ import annotations

import atexit
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from gymflow.core.config import FaultSpec, SimulatedBehaviour
from gymflow.core.errors import RuntimeFailure
from gymflow.core.processes import child_env
from gymflow.simulated.policy import PolicyEntry, save_table

#: How long a stopped server may take to exit before it is killed.
STOP_TIMEOUT_S = 10.0

#: Threads reaping stopped servers, joined at exit.
_reapers: set[threading.Thread] = set()
_reapers_lock = threading.Lock()


def _reap(process: subprocess.Popen) -> None:
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    finally:
        with _reapers_lock:
            _reapers.discard(threading.current_thread())


def _stop_in_background(process: subprocess.Popen) -> None:
    """Ask `process` to end and reap it on a thread of its own; `_reap_all` waits at exit."""
    process.terminate()
    reaper = threading.Thread(target=_reap, args=(process,), name="gymflow-policy-reaper")
    reaper.daemon = True  # joined by `_reap_all`, which runs after non-daemon threads end
    with _reapers_lock:
        _reapers.add(reaper)
    reaper.start()


@atexit.register
def _reap_all() -> None:
    with _reapers_lock:
        pending = list(_reapers)
    for reaper in pending:
        reaper.join()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalPolicyServer:
    """`with LocalPolicyServer(table) as server: server.base_url` -> http://127.0.0.1:PORT/v1"""

    def __init__(
        self,
        table: dict[str, PolicyEntry],
        *,
        seed: int = 0,
        faults: FaultSpec | None = None,
        behaviour: SimulatedBehaviour | None = None,
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.table = table
        self.seed = seed
        self.faults = faults or FaultSpec()
        self.behaviour = behaviour or SimulatedBehaviour()
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self._process: subprocess.Popen | None = None
        #: The read end of the pipe the server writes one byte to once it listens; None once read.
        self._ready: int | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalPolicyServer:
        return self.launch().wait_ready()

    def launch(self) -> LocalPolicyServer:
        """Start the server's process without waiting for it to answer (`wait_ready`)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="gymflow-policy-")
        table_path = Path(self._tmp.name) / "table.json"
        save_table(self.table, table_path)
        self.port = free_port()
        self._ready, ready_write = os.pipe()
        command = [
            sys.executable,
            "-m",
            "gymflow.simulated.policy_server",
            "--table",
            str(table_path),
            "--port",
            str(self.port),
            "--seed",
            str(self.seed),
            "--faults",
            self.faults.model_dump_json(),
            "--behaviour",
            self.behaviour.model_dump_json(),
            "--parent-pid",
            str(os.getpid()),
            "--ready-fd",
            str(ready_write),
        ]
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                env=child_env(prefixes=("GYMFLOW_",)),  # it serves answers: it needs no key
                pass_fds=(ready_write,),
            )
        finally:
            os.close(ready_write)  # the server's copy is the only one: its exit reads as EOF
        return self

    def wait_ready(self) -> LocalPolicyServer:
        """Wait until the launched server listens: it says so through a pipe, so the wait ends
        the moment it does, or when it exits (the time out counts from here: a server launched
        early may have waited long for its run, listening all along)."""
        if self._process is None:
            raise RuntimeError("local policy server was not launched")
        said = self._read_ready() if self._ready is not None else b"1"
        if said is None:
            self.stop()
            raise RuntimeFailure(
                f"local policy server did not answer within {self.startup_timeout_s}s"
            )
        # b"": the pipe closed unwritten, so the server is ending; or it ended since it said so
        if not said or self._process.poll() is not None:
            raise RuntimeFailure(f"local policy server exited with {self._process.wait()}")
        return self

    def _read_ready(self) -> bytes | None:
        """The server's byte (b"" if it exited first), or None if the time out passed first."""
        # poll, not select: a run with many connections may hold descriptors past 1024
        waiting = select.poll()
        waiting.register(self._ready, select.POLLIN)
        try:
            if not waiting.poll(self.startup_timeout_s * 1000):
                return None
            return os.read(self._ready, 1)
        finally:
            os.close(self._ready)
            self._ready = None

    def stop(self) -> None:
        """Stop the server without waiting for its process to end (reaped in the background)."""
        if self._process is not None and self._process.poll() is None:
            _stop_in_background(self._process)
        self._process = None
        if self._ready is not None:
            os.close(self._ready)
            self._ready = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LocalPolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
