"""Third-party servers the tests start from venvs of their own (LiteLLM's proxy, llama.cpp's
OpenAI-compatible server): found through an environment variable, skipped locally when absent
and a failure in CI (.ci/run creates them), waited for, and stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gymflow.simulated.local_server import free_port

#: On a busy 2-core machine LiteLLM's proxy takes ~30 s to import and start.
START_TIMEOUT_S = 180
LITELLM_VENV_VAR = "GYMFLOW_LITELLM_VENV"
LITELLM_VENV_DEFAULT = "/tmp/litellm-venv"


def venv_with(variable: str, default: str, executable: str, installed_by: str) -> Path:
    """The venv named by `variable` (else `default`) holding bin/`executable`."""
    venv = Path(os.environ.get(variable, default))
    if not (venv / "bin" / executable).exists():
        message = f"{venv}/bin/{executable} is missing ({variable}); {installed_by}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return venv


def litellm_venv() -> Path:
    return venv_with(
        LITELLM_VENV_VAR,
        LITELLM_VENV_DEFAULT,
        "litellm",
        "python -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install "
        "'litellm[proxy]' prisma (.ci/run does)",
    )


def as_a_new_job() -> None:
    """A terminal's new job (a `preexec_fn`): Ctrl-C and SIGTERM at their defaults, not blocked.
    A child inherits an ignored or blocked signal from its parent, here a worker of the suite:
    a test run's Ctrl-C would not reach it, and a Prefect process worker, which answers SIGTERM
    by sending itself SIGINT, would not stop until a second signal (`tests/flows/deployed.py`)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@contextmanager
def serving(
    command: list[str], ready_url: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`command` started with its output in `log`, yielded once `ready_url` answers 200,
    terminated (then killed) on exit."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"{command[0]} exited:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{command[0]} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    """A server a test started, terminated, then killed if it outlives 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


@contextmanager
def litellm_proxy(config: dict[str, Any], folder: Path) -> Iterator[str]:
    """`litellm --config` with `config` on a free 127.0.0.1 port; yields its base URL (…/v1)."""
    venv = litellm_venv()
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = [str(venv / "bin" / "litellm"), "--config", str(folder / "config.yaml"),
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    # offline: the model cost map ships with the package
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_DOCS": "True"}
    ready = f"http://127.0.0.1:{port}/health/liveliness"
    with serving(command, ready, folder / "litellm.log", env=env):
        yield f"http://127.0.0.1:{port}/v1"
