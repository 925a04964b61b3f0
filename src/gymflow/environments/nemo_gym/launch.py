"""Starting a NeMo Gym resources server for a run, on 127.0.0.1, with NeMo Gym's own interpreter.

NeMo Gym needs Python 3.12 and its own dependencies, so it lives in a venv of its own, named by
`GYMFLOW_NEMO_GYM_VENV`; `serve_app.py` (beside this module) runs there and serves the server's
FastAPI app without Ray, which binds every interface. The child prints its port once it listens;
it is stopped when the run's resources close, and killed if gymflow exits first."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gymflow.core.config import ConfigError
from gymflow.environments.nemo_gym.folder import NemoServer

VENV_VARIABLE = "GYMFLOW_NEMO_GYM_VENV"
SERVE_APP = Path(__file__).with_name("serve_app.py")
#: Importing NeMo Gym and a server's app takes ~5 s here; a loaded machine takes longer.
START_TIMEOUT_S = 120.0
INSTALL = (
    "python3.12 -m venv /tmp/nemo-gym-venv && /tmp/nemo-gym-venv/bin/pip install nemo-gym==0.4.0"
)


def nemo_python() -> Path:
    """The interpreter of the venv `GYMFLOW_NEMO_GYM_VENV` names. Raises ConfigError saying how
    to make one, or to give the URL of a running server instead."""
    venv = os.environ.get(VENV_VARIABLE)
    python = Path(venv or "/nonexistent") / "bin" / "python"
    if not venv or not python.exists():
        where = f"{VENV_VARIABLE}={venv} holds no bin/python" if venv else f"{VENV_VARIABLE} unset"
        raise ConfigError(
            f"a NeMo Gym environment is served by NeMo Gym's own interpreter ({where}): make one "
            f"with `{INSTALL}` and set {VENV_VARIABLE}=/tmp/nemo-gym-venv, or give resources_url "
            "of a running resources server"
        )
    return python


@dataclass
class ServerProcess:
    server: NemoServer
    url: str = ""
    _process: subprocess.Popen | None = None
    _log: object = field(default=None, repr=False)

    def start(self) -> str:
        """Start the server and return its URL once it answers; ConfigError with the end of
        its log when it cannot start (a missing dependency, a config it rejects)."""
        server = self.server
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (kept open for the child's life)
        self._process = subprocess.Popen(
            [
                str(nemo_python()), str(SERVE_APP), str(server.root), server.name,
                str(server.config_file), server.instance,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            # in the server's folder, as NeMo Gym runs it (data paths relative to it); gymflow's
            # own packages stay out of its path
            cwd=server.folder,
            env={**os.environ, "PYTHONPATH": ""},
        )  # fmt: skip
        atexit.register(self.stop)
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        assert self._process.stdout is not None
        while time.monotonic() < deadline and self._process.poll() is None:
            ready, _, _ = select.select([self._process.stdout], [], [], 0.2)
            if ready:
                line = self._process.stdout.readline()
                break
        try:
            port = json.loads(line)["port"]
        except (ValueError, KeyError, TypeError):
            self.stop()
            raise ConfigError(
                f"NeMo Gym server {server.name} ({server.config_file}) did not start: "
                f"{self.log_tail()}"
            ) from None
        self.url = f"http://127.0.0.1:{port}"
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/openapi.json", timeout=5.0).status_code == 200:
                    return self.url
            time.sleep(0.1)
        self.stop()
        raise ConfigError(f"NeMo Gym server {server.name} listened but never answered")

    def log_tail(self, limit: int = 1500) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)  # type: ignore[attr-defined]
        text = self._log.read().decode(errors="replace").strip()  # type: ignore[attr-defined]
        return text[-limit:] or "(no output)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process is not None and process.stdout is not None:
            process.stdout.close()
        atexit.unregister(self.stop)
