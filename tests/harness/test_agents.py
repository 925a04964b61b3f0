"""The real mini-swe-agent and Codex binaries, driven by the scripted model (`gym serve model
--workspace-tasks`) through the recording proxy, solve workspace tasks: the agent runs the
task's solution in its own shell tool and finishes as it expects; the calls its own log counts
equal the calls the proxy recorded. Skipped locally without the installs, a failure in CI."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.core.config import ModelConfig, Sampling
from gymflow.harness.agents import AGENTS, AgentInstallMissing, AgentRecipe
from gymflow.harness.proxy import RecordingProxy
from gymflow.models.client import ResponsesClient
from gymflow.simulated.local_server import free_port
from gymflow.simulated.scripted import DONE_TEXT, MINI_SWE_FINISH
from tests.conftest import GYM
from tests.servers import serving, venv_with

TASKS = Path(__file__).parent / "workspace_tasks"


@pytest.fixture(scope="module")
def scripted_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`gym serve model --workspace-tasks` as a user starts it; yields its base URL (…/v1)."""
    port = free_port()
    command = [GYM, "serve", "model", "--workspace-tasks", str(TASKS), "--port", str(port)]
    log = tmp_path_factory.mktemp("scripted") / "serve.log"
    with serving(command, f"http://127.0.0.1:{port}/health", log):
        assert "2 workspace tasks" in log.read_text()
        yield f"http://127.0.0.1:{port}/v1"


def installed(name: str) -> AgentRecipe:
    recipe = AGENTS[name]
    venv_with(recipe.prefix_variable, recipe.default_prefix, recipe.executable.split("/")[-1],
              recipe.install_hint)  # fmt: skip
    return recipe


async def drive(
    recipe: AgentRecipe, task: Path, upstream: str, folder: Path
) -> tuple[subprocess.CompletedProcess[str], RecordingProxy, Path]:
    """One rollout of `recipe` on `task` in a fresh copy of its workspace, through a proxy."""
    workspace, logs = folder / "workspace", folder / "logs"
    seeded = task / "environment" / "workspace"
    if seeded.is_dir():
        shutil.copytree(seeded, workspace)
    workspace.mkdir(exist_ok=True)
    logs.mkdir()
    config = ModelConfig(kind="responses", base_url=upstream, name="scripted", max_retries=0)
    client = ResponsesClient(config, upstream, Sampling(temperature=0.0))
    async with client, RecordingProxy(client, seed=0) as proxy:
        values = {
                "base_url": proxy.base_url, "api_key": proxy.api_key, "model": "scripted",
                "instruction": (task / "instruction.md").read_text(), "workspace": str(workspace),
                "logs": str(logs), "max_turns": "8",
            }  # fmt: skip
        env = {**os.environ, **recipe.environment(**values)}
        env |= {"OPENAI_BASE_URL": proxy.base_url, "OPENAI_API_KEY": proxy.api_key}
        argv = recipe.argv(**values)
        process = await asyncio.create_subprocess_exec(
                *argv, cwd=workspace, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    done = subprocess.CompletedProcess(argv, process.returncode or 0, out.decode(), err.decode())
    return done, proxy, workspace


def _check(task: str, workspace: Path) -> None:
    """The task's own test script's condition (its reward file path is the sandbox's)."""
    if task == "write-greeting":
        assert (workspace / "greeting.txt").read_text() == "hello gymflow\n"
    else:
        assert "return a + b" in (workspace / "calc.py").read_text()


@pytest.mark.parametrize("task", ["write-greeting", "fix-add"])
@pytest.mark.parametrize("agent", ["mini-swe-agent", "codex"])
def test_the_scripted_model_drives_the_real_agent(
    agent: str, task: str, scripted_model: str, tmp_path: Path
) -> None:
    recipe = installed(agent)
    done, proxy, workspace = asyncio.run(drive(recipe, TASKS / task, scripted_model, tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    _check(task, workspace)
    logged = recipe.logged_calls(tmp_path / "logs", done.stderr)
    assert logged == len({call.call_index for call in proxy.calls}) == 2, (logged, proxy.calls)
    assert all(call.status == "completed" and call.input_tokens for call in proxy.calls)
    last = proxy.calls[-1].response
    assert (MINI_SWE_FINISH if agent == "mini-swe-agent" else DONE_TEXT) in last


def test_a_missing_install_is_its_own_failure(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GYMFLOW_CODEX_PREFIX", str(tmp_path / "nowhere"))
    with pytest.raises(AgentInstallMissing, match="GYMFLOW_CODEX_PREFIX") as missing:
        AGENTS["codex"].binary()
    assert missing.value.kind == "agent_install_missing"


@pytest.mark.parametrize("agent", ["mini-swe-agent", "codex"])
def test_the_installed_version_is_read_from_the_package_manager(agent: str) -> None:
    version = installed(agent).version()
    assert version[0].isdigit() and version.count(".") >= 2
