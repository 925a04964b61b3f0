"""How the `command` harness reports an agent: each way an agent fails is a failure kind of its own
(never a reward of 0, never a wrong answer), a test script that fails is the answer failing, one
that writes no reward is a verifier failure, and an agent's model calls go through the recording
proxy, whose records are the rollout's calls."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from gymflow.config import HarnessConfig, ModelConfig, Sampling
from gymflow.environments.registry import Benchmark
from gymflow.environments.workspace.environment import WorkspaceEnvironment
from gymflow.harness.command import command
from gymflow.harness.recipes import Recipe, register_recipe
from gymflow.models.client import ResponsesClient
from tests.conftest import require_tool
from tests.models import conftest as models

served_model = models.served_model

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"

#: An agent that asks the model once through the endpoint it was given (stdlib only).
ASKING_AGENT = """
import json, os, sys, urllib.request
body = json.dumps({"model": "any", "messages": [{"role": "user", "content": "hello"}]}).encode()
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", body,
    {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
reply = json.load(urllib.request.urlopen(request, timeout=30))
print("ANSWER:", reply["choices"][0]["message"]["content"][:40])
assert sys.argv[1] == os.environ["OPENAI_BASE_URL"]
"""


@pytest.fixture
def tasks(tmp_path: Path) -> WorkspaceEnvironment:
    """A benchmark of one shipped task, its agent's time cut to 2 s and its memory to 256 MB."""
    require_tool("bwrap")
    root = tmp_path / "tasks"
    shutil.copytree(SHIPPED / "fix-median", root / "fix-median")
    toml = root / "fix-median" / "task.toml"
    limits = toml.read_text().replace("timeout_sec = 300.0", "timeout_sec = 2.0")
    toml.write_text(limits.replace("memory_mb = 1024", "memory_mb = 256"))
    (root / "fix-median" / "environment" / "agent.py").write_text(ASKING_AGENT)
    (tmp_path / "benchmarks").mkdir()
    file = tmp_path / "benchmarks" / "one.yaml"
    benchmark = Benchmark(name="one", workspace="../tasks")
    return WorkspaceEnvironment.from_benchmark(benchmark, file)


def _rollout(
    env: WorkspaceEnvironment, harness: HarnessConfig, base_url: str = "http://127.0.0.1:9/v1"
) -> tuple[Any, Any]:
    async def scenario():
        config = ModelConfig(kind="chat_completions", base_url=base_url, name="m", max_retries=0)
        server = env.resources_server()
        task = env.tasks()[0]
        async with ResponsesClient(config, base_url, Sampling()) as client:
            session = await server.seed_session(task)
            try:
                episode = await command(
                    client=client, server=server, session_id=session, task=task,
                    prompt=task.inputs["instruction"], seed=1, config=harness,
                )  # fmt: skip
                verdict = None
                if episode.failure_kind is None:
                    verdict = await server.verify(session, task, episode.output_text, [])
            finally:
                await server.close_session(session)
        return episode, verdict

    return asyncio.run(scenario())


def _own(line: str) -> HarnessConfig:
    return HarnessConfig(name="command", command=line, agent_version="test-agent 1.0")


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("exit 3", "agent_crashed"),
        ("sleep 30", "agent_timeout"),
        ("no-such-agent --run", "agent_install_missing"),
        ("python3 -c 'x = b\"x\" * (600 << 20)'", "agent_crashed"),
    ],
)
def test_each_agent_failure_has_its_kind(tasks: WorkspaceEnvironment, line: str, kind: str) -> None:
    episode, verdict = _rollout(tasks, _own(line))
    assert episode.failure_kind == kind, episode.error
    assert verdict is None  # not judged: no reward, no wrong answer


def test_an_agent_at_its_step_limit(tasks: WorkspaceEnvironment) -> None:
    register_recipe(Recipe(name="test-step-limit", command="exit 42", step_limit_exits=(42,)))
    episode, _ = _rollout(tasks, HarnessConfig(name="command", agent="test-step-limit"))
    assert episode.failure_kind == "agent_step_limit"


def test_a_sandbox_that_cannot_start(tasks: WorkspaceEnvironment, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # neither bwrap nor docker is found
    episode, _ = _rollout(tasks, HarnessConfig(name="command", agent="oracle", sandbox="docker"))
    assert episode.failure_kind == "sandbox_error", episode.error


def test_a_failing_test_script_is_the_answer_failing(tasks: WorkspaceEnvironment) -> None:
    episode, verdict = _rollout(tasks, HarnessConfig(name="command", agent="nothing"))
    assert episode.failure_kind is None
    assert (verdict.status, verdict.reward, verdict.passed) == ("ok", 0.0, False)


def test_no_reward_written_is_a_verifier_failure(tasks: WorkspaceEnvironment) -> None:
    test_sh = tasks.root / "fix-median" / "tests" / "test.sh"
    test_sh.write_text("#!/bin/bash\nexit 0\n")
    episode, verdict = _rollout(tasks, HarnessConfig(name="command", agent="oracle"))
    assert episode.failure_kind is None
    assert verdict.reward is None and verdict.failure_kind == "reward_missing"


def test_an_agent_that_writes_its_own_reward_gets_the_tests_verdict(
    tasks: WorkspaceEnvironment,
) -> None:
    line = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"
    episode, verdict = _rollout(tasks, _own(line))
    assert episode.failure_kind is None
    assert verdict.reward == 0.0  # /logs/verifier was emptied before the tests ran


def test_the_agents_model_calls_are_the_proxys_records(
    tasks: WorkspaceEnvironment, served_model: str
) -> None:
    episode, verdict = _rollout(tasks, _own("python3 agent.py {base_url}"), f"{served_model}/v1")
    assert episode.failure_kind is None, episode.error
    assert "ANSWER:" in episode.output_text
    (call,) = episode.calls
    assert call.status == "completed" and call.http_status == 200
    assert call.request["model"] == "m"  # the run's model, not the agent's
    assert episode.counters["model_calls"] == 1 and "model_free" not in episode.counters
    assert verdict.reward == 0.0  # it asked, and fixed nothing


def test_a_command_line_is_filled_in_shell_quoted_other_braces_left() -> None:
    from gymflow.harness.command import filled

    line = "awk '{print $1}' {instruction_file} ${HOME} --model {model}"
    values = {"instruction_file": "/logs/agent/my file.md", "model": "a'b"}
    assert filled(line, values) == (
        "awk '{print $1}' '/logs/agent/my file.md' ${HOME} --model 'a'\"'\"'b'"
    )
