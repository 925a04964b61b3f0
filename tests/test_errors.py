"""One error root: every exception class gymflow defines is a `GymflowError` (whose branch gives
the CLI's exit code) or an internal one listed here with the reason it never reaches a user; the
CLI reports a GymflowError in one line and anything else as a bug, with its traceback."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import signal
from pathlib import Path

import gymflow
from gymflow.cli import exit_codes
from gymflow.core.errors import GateFailed, GymflowError, RuntimeFailure, UserError
from gymflow.core.registry import UnknownName
from gymflow.rollouts.stopping import RunStopped
from tests.conftest import gym, gym_in_process
from tests.faults.stores import one_error_line

#: Exceptions that are control flow inside one component and never end a command.
INTERNAL = {
    "gymflow.core.protocols.ToolError": "a tool's refusal: the tool loop hands its "
    "message to the model as the tool's output",
    "gymflow.core.protocols.ToolServerError": "a tool's server failing on one call: the tool "
    "loop hands its answer to the model and keeps the failure as the rollout's evidence",
    "gymflow.harness.tool_arguments.MalformedArguments": "the model's unusable tool arguments: "
    "the tool loop tells the model",
    "gymflow.simulated.policy_server.SimulatedReset": "the simulated server's way to drop a "
    "connection mid-answer",
    "gymflow.verifiers.bfcl.Malformed": "a call the BFCL verifier judges wrong",
    "gymflow.verifiers.pool.WorkerTimeout": "recorded by the resources server as a failure kind",
    "gymflow.verifiers.pool.WorkerFailed": "recorded by the resources server as a failure kind",
    "gymflow.verifiers.pool.JobRejected": "a WorkerFailed whose worker stays in the pool",
    "gymflow.verifiers.pool.WorkerOutOfMemory": "a WorkerFailed recorded as the answer failing",
    "gymflow.verifiers.pool.Abandoned": "the caller was cancelled and no longer waits",
    "gymflow.verifiers.sandbox.CandidateRaised": "the candidate program's own exception: what "
    "code_exec judges",
    "gymflow.verifiers.sandbox.SandboxEnded": "the candidate's process ended; a BaseException "
    "so the candidate's tests cannot swallow it",
    "gymflow.verifiers.sandbox_runner.Unsupported": "runs in the candidate's process, which "
    "imports nothing from gymflow",
    "gymflow.verifiers.sandbox_runner.OutOfTime": "decoding the candidate's value outlived its "
    "deadline: judged as the answer running out of time",
    "gymflow.environments.workspace.harbor_task.RewardProblem": "what a test script wrote is no "
    "reward: recorded as the verifier's failure kind reward_missing, never raised to the user",
    "gymflow.environments.nemo_gym.serve_app.NeedsNetwork": "raised inside a NeMo Gym server's "
    "process (NeMo Gym's venv), which imports nothing from gymflow",
    "gymflow.core.bounded_jinja.RenderTimeout": "a Jinja SecurityError, raised inside the render "
    "and turned into a PromptTimeout naming the file and row",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the gymflow package, by qualified name."""
    found = {}
    for module in pkgutil.walk_packages(gymflow.__path__, "gymflow."):
        imported = importlib.import_module(module.name)
        for _, cls in inspect.getmembers(imported, inspect.isclass):
            if cls.__module__ == module.name and issubclass(cls, BaseException):
                found[f"{module.name}.{cls.__qualname__}"] = cls
    return found


def test_every_exception_is_a_gymflow_error_or_a_listed_internal_one():
    classes = _exception_classes()
    outside = {name for name, cls in classes.items() if not issubclass(cls, GymflowError)}
    assert outside == set(INTERNAL), "rebase it on gymflow.core.errors, or list it with a reason"
    # the known ones, so a walk that finds nothing cannot pass
    assert {"gymflow.core.config.ConfigError", "gymflow.store.db.StoreError"} <= set(classes)


def test_each_branch_exits_with_its_cli_code():
    assert UserError.exit_code == exit_codes.BAD_INPUT
    assert GateFailed.exit_code == exit_codes.GATE_FAILED
    assert RuntimeFailure.exit_code == GymflowError.exit_code == exit_codes.RUNTIME
    dead = RunStopped("server gone", cause="dead_server")
    ctrl_c = RunStopped("stopped", cause="signal", signal_number=signal.SIGINT)
    cancelled = RunStopped("cancelled", cause="cancelled")
    assert dead.exit_code == exit_codes.RUNTIME
    assert ctrl_c.exit_code == exit_codes.INTERRUPTED
    assert cancelled.exit_code == exit_codes.TERMINATED


def test_a_lookup_error_reads_as_raised():
    # a KeyError's own str() quotes its message; the CLI prints str(exc)
    unknown = UnknownName("verifier", "nope", ["b", "a"])
    assert isinstance(unknown, LookupError) and isinstance(unknown, UserError)
    assert str(unknown) == "unknown verifier 'nope' (known: a, b)"


def test_bad_config_and_bad_flags_exit_1_in_one_line(tmp_path: Path):
    config = tmp_path / "bad.yaml"
    config.write_text(f"benchmark: arithmetic-smoke\nout: {tmp_path / 'run'}\nrepetas: 2\n")
    result = gym_in_process("eval", "run", str(config), cwd=tmp_path)
    assert result.returncode == exit_codes.BAD_INPUT
    assert str(config) in one_error_line(result.stderr) and "repetas" in result.stderr
    assert not (tmp_path / "run").exists()
    # raised where the input is read (no handler of the command's own): same one line; the
    # servers and the bad GYMFLOW_LOCAL_PREFECT stay gym processes (not refused, a server would
    # serve on; the variable is read as `gym` starts, before `main`)
    params = gym("serve", "environment", "arithmetic", "--param", "nope=1", cwd=tmp_path)
    assert params.returncode == exit_codes.BAD_INPUT
    assert "verifier 'numeric_match' parameters: nope" in one_error_line(params.stderr)
    study = gym_in_process("study", "run", str(tmp_path / "nowhere.yaml"), "--check", cwd=tmp_path)
    assert study.returncode == exit_codes.BAD_INPUT
    assert "nowhere.yaml: cannot read config" in one_error_line(study.stderr)
    unknown = gym("serve", "model", "--benchmark", "no-such-bench", cwd=tmp_path)
    assert unknown.returncode == exit_codes.BAD_INPUT
    assert "unknown benchmark 'no-such-bench'" in one_error_line(unknown.stderr)
    mode = {"GYMFLOW_LOCAL_PREFECT": "bogus", "PREFECT_API_URL": ""}
    run = gym(
        "eval", "run", "--benchmark", "arithmetic-smoke", "--out", "r", cwd=tmp_path, env=mode
    )
    assert run.returncode == exit_codes.BAD_INPUT and not (tmp_path / "r").exists()
    assert "GYMFLOW_LOCAL_PREFECT='bogus': use auto, on or off" in one_error_line(run.stderr)


_BUGGY_MANIFEST = """\
name: buggy
description: An environment whose resources server divides by zero.
domain: testing
verifier: {name: numeric_match}
prompt_template: "Compute {{ question }}. Answer: <number>"
splits:
  test: {size: 1}
default_split: test
entrypoint: env:Buggy
"""

_BUGGY_ENV = """\
from gymflow.environments.base import Environment


class Buggy(Environment):
    def resources_server(self, verifier_params=None):
        return 1 / 0
"""


def test_a_bug_prints_its_traceback_and_exits_3(tmp_path: Path):
    folder = tmp_path / "envs" / "buggy"
    folder.mkdir(parents=True)
    (folder / "environment.yaml").write_text(_BUGGY_MANIFEST)
    (folder / "env.py").write_text(_BUGGY_ENV)
    env = {"GYMFLOW_ENVIRONMENTS_PATH": str(tmp_path / "envs")}
    result = gym_in_process("list", "environments", "buggy", cwd=tmp_path, env=env)
    assert result.returncode == exit_codes.RUNTIME, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "return 1 / 0" in result.stderr  # the frame that raised, without GYMFLOW_DEBUG
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: unexpected ZeroDivisionError: division by zero")
    assert "gymflow bug" in last
