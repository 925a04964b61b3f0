"""Starting and stopping the local policy server as a child process on 127.0.0.1.

A separate process, not a thread: the server and the rollout collector each get a core, and the
server's work never holds the collector's GIL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gymflow.config import FaultSpec
from gymflow.errors import RuntimeFailure
from gymflow.processes import answers_ok
from gymflow.simulated.policy import PolicyEntry, save_table


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
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.table = table
        self.seed = seed
        self.faults = faults or FaultSpec()
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self._process: subprocess.Popen | None = None
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
            "--parent-pid",
            str(os.getpid()),
        ]
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, env=os.environ.copy())
        return self

    def wait_ready(self) -> LocalPolicyServer:
        """Wait until the launched server answers its health route (the time out counts from
        here: a server launched early may have waited long for its run, answering all along)."""
        if self._process is None:
            raise RuntimeError("local policy server was not launched")
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeFailure(f"local policy server exited with {self._process.returncode}")
            if answers_ok(f"http://127.0.0.1:{self.port}/health"):
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeFailure(f"local policy server did not answer within {self.startup_timeout_s}s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LocalPolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
