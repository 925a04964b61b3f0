"""The fault-injection suite's fixture: one Prefect server for every `gym eval run` here.

Each `gym eval run` in ephemeral mode starts its own Prefect server (about 10 s); the kill/resume
test alone runs a dozen of them. One `prefect server start` on 127.0.0.1, shared by the suite and
stopped at its end, brings a flow run down to about 2.5 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

PREFECT = str(Path(sys.executable).parent / "prefect")
STARTUP_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API URL of a Prefect server this suite starts, and stops when it is done.

    While iterating, point GYMFLOW_FAULTS_PREFECT_API at a server you run to skip the start-up."""
    if os.environ.get("GYMFLOW_FAULTS_PREFECT_API"):
        yield os.environ["GYMFLOW_FAULTS_PREFECT_API"]
        return
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
    }
    log = (home / "server.log").open("wb")
    command = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--no-services", "--no-ui", "--analytics-off"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so stopping it stops its children
    )
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"prefect server exited:\n{(home / 'server.log').read_text()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"prefect server not healthy within {STARTUP_TIMEOUT_S}s")
            time.sleep(0.25)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
