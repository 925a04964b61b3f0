"""Starting a NeMo Gym resources server for a run, on 127.0.0.1, with NeMo Gym's own interpreter.

NeMo Gym needs Python 3.12 and its own dependencies, so it lives in a venv of its own, named by
`GYMFLOW_NEMO_GYM_VENV`; `serve_app.py` (beside this module) runs there and serves the server's
FastAPI app without Ray, which binds every interface. The child writes its port to a pipe of its
own once it listens, its output (stdout and stderr) goes to a log whose end every error shows; it
is stopped when the run's resources close, and killed if gymflow exits first."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gymflow.core.config import ConfigError
from gymflow.core.processes import child_env
from gymflow.environments.nemo_gym.folder import NemoServer

VENV_VARIABLE = "GYMFLOW_NEMO_GYM_VENV"
SERVE_APP = Path(__file__).with_name("serve_app.py")
#: Importing NeMo Gym and a server's app takes ~5 s on an idle machine; at load average 37 on
#: two cores calendar and circle_click took over 120 s.
START_TIMEOUT_S = 300.0
#: From its port to its first answer, at least.
ANSWER_TIMEOUT_S = 120.0
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


#: Traceback frames of the web stack every server runs on, left out of a log's end.
#: (An exception group's frames are indented with `|`.)
_FRAMEWORK_FRAME = re.compile(r'^([\s|]+)File ".*/site-packages/(starlette|fastapi|anyio|uvicorn)/')


def _cause(tail: str) -> str:
    """The line that says why, first: a traceback's last line (`KeyError: ...`), else the
    log's last line."""
    lines = [line for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith((" ", "\t", "|", "+")) and ":" in line:
            return line[:500]
    return lines[-1][:500] if lines else "(no output)"


def _own_frames(lines: list[str]) -> list[str]:
    kept, frame = [], None  # frame: the indent of a skipped frame's `File` line
    for line in lines:
        match = _FRAMEWORK_FRAME.match(line)
        if match:
            frame = match.group(1) + "  "
        elif frame is None or not line.startswith(frame):
            frame = None  # its source line and ^^^ markers are indented deeper
            kept.append(line)
    return kept


@dataclass
class ServerProcess:
    server: NemoServer
    #: gymflow's judge endpoint (judge.py), which the server's client calls; "" when none.
    judge_url: str = ""
    #: the interpreter to run it with: its prepared venv's (prepare.py), else NeMo Gym's own
    python: Path | None = None
    url: str = ""
    _process: subprocess.Popen | None = None
    _log: Path | None = field(default=None, repr=False)

    def bindings(self) -> dict[str, str]:
        """The global config keys NeMo Gym's configs interpolate, bound to gymflow's values: the
        model a server asks (`policy_*`, `judge_*`) is gymflow's judge endpoint."""
        base = f"{self.judge_url}/v1" if self.judge_url else ""
        return {
            key: value
            for key, value in {
                "policy_base_url": base, "policy_api_key": "gymflow", "policy_model_name": "judge",
                "judge_base_url": base, "judge_api_key": "gymflow", "judge_model_name": "judge",
            }.items()
            if value or base
        }  # fmt: skip

    def start(self) -> str:
        """Start the server and return its URL once it answers; ConfigError with the end of
        its log when it cannot start (a missing dependency, a config it rejects, Ray, the
        network). Its port comes on a pipe of its own, so nothing it prints is taken for it."""
        server = self.server
        handle, log = tempfile.mkstemp(prefix=f"gymflow-ng-{server.name}-", suffix=".log")
        os.close(handle)
        self._log = Path(log)
        read_end, write_end = os.pipe()
        # Not gymflow's environment: a server runs code of its own over the rows (bigcodebench
        # their tests), and asks its judge through gymflow's endpoint, which holds the key.
        # Hugging Face's cache settings (no token); unbuffered, so the log's end is what it
        # printed last; offline, so a hub download says so at once instead of waiting on a
        # network this machine may not have
        env = child_env(prefixes=("HF_",), set_to={"PYTHONPATH": "", "PYTHONUNBUFFERED": "1",
                        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})  # fmt: skip
        try:
            # appended to, so reading its end (log_tail) never moves where the server writes
            output = self._log.open("ab")
            self._process = subprocess.Popen(
                [
                    str(self.python or nemo_python()), str(SERVE_APP), str(server.root),
                    server.name, str(server.config_file), server.instance,
                    "--port-fd", str(write_end), "--bindings", json.dumps(self.bindings()),
                    "--judge-url", self.judge_url, "--parent-pid", str(os.getpid()),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(write_end,),
                # in the server's folder, as NeMo Gym runs it (data paths relative to it);
                # gymflow's own packages stay out of its path
                cwd=server.folder,
                env=env,
            )  # fmt: skip
        finally:
            os.close(write_end)
            output.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        try:
            while time.monotonic() < deadline and self._process.poll() is None:
                ready, _, _ = select.select([read_end], [], [], 0.2)
                if ready:
                    line = os.read(read_end, 4096)
                    break
        finally:
            os.close(read_end)
        try:
            port = json.loads(line)["port"]
        except (ValueError, KeyError, TypeError):
            waited = time.monotonic() >= deadline
            tail = self.log_tail()
            self.stop()
            why = f"gave no port in {START_TIMEOUT_S:.0f} s" if waited else "did not start"
            raise ConfigError(
                f"NeMo Gym server {server.name} {why}: {_cause(tail)}\n"
                f"({server.config_file}; its log ends:)\n{tail}"
            ) from None
        self.url = f"http://127.0.0.1:{port}"
        # its own allowance: a server that took most of the start-up bound to import still
        # gets time for its app's own start-up (uvicorn's lifespan) before its first answer
        deadline = max(deadline, time.monotonic() + ANSWER_TIMEOUT_S)
        while time.monotonic() < deadline and self._process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/openapi.json", timeout=5.0).status_code == 200:
                    return self.url
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise ConfigError(f"NeMo Gym server {server.name} listened but never answered: {tail}")

    def log_tail(self, limit: int = 3000) -> str:
        """The end of the server's output: what it printed, its tracebacks without the web
        framework's frames (a dozen of them around every server's own)."""
        if self._log is None or not self._log.exists():
            return ""
        with self._log.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 16 * limit))
            text = handle.read().decode(errors="replace")
        return "\n".join(_own_frames(text.splitlines())).strip()[-limit:] or "(no output)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        atexit.unregister(self.stop)
        if self._log is not None and process is not None:
            self._log.unlink(missing_ok=True)
            self._log = None
