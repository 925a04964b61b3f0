"""`gym server`: the server runs go to, and the recipe for a persistent Prefect server and
workers, printed plainly (whole lines, no colour codes) so it can be copied from a pipe."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gymflow.simulated.local_server import free_port
from tests.conftest import gym

RECIPE = (
    "prefect server start --host 0.0.0.0 --port 4200          # one machine, keep it running",
    "export PREFECT_API_URL=http://SERVER:4200/api",
    "prefect work-pool create gymflow-process --type process  # once",
    "export PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30",
    "GYMFLOW_CHECKOUT=$PWD prefect worker start --pool gymflow-process   # each worker machine",
    "gym server --crash-silent-runs",
    "prefect --no-prompt deploy --all",
    "gym serve reports --root . --port 8200",
)


def test_gym_server_prints_the_team_setup_in_whole_lines(tmp_path: Path) -> None:
    result = gym("server", cwd=tmp_path, check=True, env={"COLUMNS": "40"})
    assert "ephemeral mode (PREFECT_API_URL is not set)" in result.stdout
    lines = result.stdout.splitlines()
    for line in RECIPE:
        assert any(line in printed for printed in lines), line
    assert "\x1b[" not in result.stdout


def test_gym_server_names_the_server_it_is_connected_to(tmp_path: Path) -> None:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    result = gym("server", cwd=tmp_path, check=True, env={"PREFECT_API_URL": api})
    assert f"the Prefect server at {api} (PREFECT_API_URL), which does not answer" in result.stdout
    assert "ephemeral" not in result.stdout


@pytest.fixture
def version_server():
    """A stand-in answering Prefect's /api/admin/version, on 127.0.0.1."""

    async def version(_):
        return JSONResponse("3.9.1")

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/api/admin/version", version)]),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.05)
    yield f"http://127.0.0.1:{port}/api"
    server.should_exit = True
    thread.join(10)


def test_gym_server_says_which_version_answers(tmp_path: Path, version_server: str) -> None:
    assert httpx.get(f"{version_server}/admin/version").json() == "3.9.1"
    result = gym("server", cwd=tmp_path, check=True, env={"PREFECT_API_URL": version_server})
    assert f"connected to the Prefect server at {version_server}" in result.stdout
    assert "version 3.9.1" in result.stdout
