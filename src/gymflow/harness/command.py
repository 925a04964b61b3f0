"""`harness.name: command`: an agent CLI run in the task's sandbox, on the task's workspace.

The harness opens the session's sandbox (`harness.sandbox`), uploads what the recipe needs (the
oracle's solution), writes the instruction to /logs/agent/instruction.md, and runs the recipe's
command under the task's `[agent] timeout_sec`. An agent that talks to a model reaches gymflow's
recording proxy (gymflow.harness.proxy) and nothing else: its base URL, as seen inside the
sandbox, is exported as OPENAI_BASE_URL, with the proxy's own per-rollout key as OPENAI_API_KEY
(the model's real key stays with the proxy), and both are filled into the command (`{base_url}`,
`{api_key}`, beside `{model}`, `{instruction}`, `{instruction_file}`, `{workspace}`, `{logs}`,
`{max_turns}`, each shell-quoted); the calls the proxy saw are the rollout's model calls. The
task's test script then judges the workspace (gymflow.environments.workspace).

How an agent fails is a failure kind of its own, never a reward and never a wrong answer:
`agent_install_missing` (not installed, or its command not found), `agent_timeout` (killed at the
time limit), `agent_step_limit` (stopped at its own step or turn limit), `agent_crashed` (any
other non-zero exit, or out of memory), and `sandbox_error` (the sandbox failed around it)."""

from __future__ import annotations

import re
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gymflow.core.config import HarnessConfig
from gymflow.core.protocols import Resources
from gymflow.core.statuses import (
    AGENT_CRASHED,
    AGENT_INSTALL_MISSING,
    AGENT_STEP_LIMIT,
    AGENT_TIMEOUT,
    SANDBOX_ERROR,
)
from gymflow.core.tasks import Task
from gymflow.harness.base import Episode, harness
from gymflow.harness.recipes import (
    AGENT_LOGS,
    INSTRUCTION_FILE,
    Recipe,
    get_recipe,
    own_command,
)
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import user_message
from gymflow.sandboxes.base import WORKDIR, ExecResult, Sandbox, SandboxError

#: Seconds past the agent's time limit an in-process recipe gets to return its evidence.
GRACE_S = 30.0
#: Files left in the sandbox a rollout's error names (the count is in its counters).
MAX_LEFT_SHOWN = 5
#: Exit status of a command bash could not find.
NOT_FOUND = 127


@dataclass(slots=True)
class AgentContext:
    """What an in-process recipe gets: the run's client, the sandbox, the task and its limits."""

    client: ResponsesClient
    sandbox: Sandbox
    session_id: str
    task: Task
    prompt: str
    seed: int | None
    config: HarnessConfig
    deadline: float


def recipe_of(config: HarnessConfig) -> Recipe:
    """The recipe a harness config names (`agent`, or its own `command`). Raises UserError."""
    from gymflow.core.errors import UserError

    if config.command and config.agent:
        raise UserError("harness: give `agent` (a recipe) or `command` (your own), not both")
    if config.command:
        return own_command(config.command, config.agent_version)
    if not config.agent:
        raise UserError("harness.agent: the `command` harness needs an agent recipe or a command")
    return get_recipe(config.agent)


def agent_version(config: HarnessConfig) -> str:
    """The agent's package and version, as the run records it: the config's, else the recipe's."""
    return config.agent_version or recipe_of(config).version()


@harness("command")
async def command(
    *,
    client: ResponsesClient,
    server: Resources,
    session_id: str,
    task: Task,
    prompt: str,
    seed: int | None,
    config: HarnessConfig,
) -> Episode:
    episode = Episode(trajectory=[user_message(prompt)])
    recipe = recipe_of(config)
    missing = recipe.missing()
    if missing:
        return _failed(episode, AGENT_INSTALL_MISSING, missing)
    open_sandbox = getattr(server, "open_sandbox", None)
    if open_sandbox is None:
        return _failed(
            episode,
            "harness_error",
            "harness `command` runs workspace tasks (Harbor's format) only",
        )
    try:
        sandbox = await open_sandbox(session_id, config.sandbox, recipe.installs())
        workspace_task = server.env.workspace_task(task.task_id)  # type: ignore[attr-defined]
        await _prepare(sandbox, recipe, workspace_task.folder, prompt)
    except SandboxError as exc:
        return _failed(episode, SANDBOX_ERROR, str(exc))
    timeout_s = workspace_task.agent_timeout_s
    started = time.monotonic()
    if recipe.run is not None:
        return await _in_process(recipe, episode, client, sandbox, session_id, task, prompt,
                                 seed, config, started + timeout_s)  # fmt: skip
    env = {"GYMFLOW_INSTRUCTION": prompt, "GYMFLOW_INSTRUCTION_FILE": INSTRUCTION_FILE}
    env |= {"GYMFLOW_MAX_TURNS": str(config.max_turns)} | recipe.env()
    model_failure: str | None = None
    fill = {
        "instruction_file": INSTRUCTION_FILE,
        "instruction": prompt,
        "model": client.config.name,
        "base_url": "",
        "api_key": "",
        "workspace": WORKDIR,
        "logs": AGENT_LOGS,
        "max_turns": str(config.max_turns),
    }
    try:
        if recipe.needs_model:
            from gymflow.harness.proxy import RecordingProxy

            # The proxy's key is a token for this rollout only (the model's own key stays with
            # the proxy): a call without it, or after the agent's time, is recorded as refused.
            async with RecordingProxy(client, seed=seed, deadline_s=timeout_s) as proxy:
                inside = await sandbox.expose_model(proxy.base_url)
                env |= {"OPENAI_BASE_URL": inside, "OPENAI_API_KEY": proxy.api_key}
                fill |= {"base_url": inside, "api_key": proxy.api_key}
                result = await _run(sandbox, recipe, fill, env, timeout_s)
            episode.calls = list(proxy.calls)
            model_failure = proxy.failure_kind()
        else:
            result = await _run(sandbox, recipe, fill, env, timeout_s)
        if recipe.logs is not None:
            await _read_agent_logs(sandbox, recipe, episode, prompt)
    except SandboxError as exc:
        return _failed(episode, SANDBOX_ERROR, str(exc))
    _record(episode, recipe, result, model_failure)
    if not recipe.needs_model:  # health reads no missing model evidence into it
        episode.counters["model_free"] = 1
    return episode


async def _read_agent_logs(sandbox: Sandbox, recipe: Recipe, episode: Episode, prompt: str) -> None:
    """The agent's own account, from its logs: its trajectory (an ATIF file it wrote, else its
    recipe's reader), and how many model calls it says it made (`counters
    ["agent_logged_calls"]`), both set against the calls the proxy recorded. A log the agent
    left as a link, a device or past the bound stays in the sandbox (`Sandbox.download`): it is
    counted (`counters["agent_logs_refused"]`) and named in the rollout's error, not read."""
    from gymflow.harness.agent_logs import atif_trajectory

    assert recipe.logs is not None
    with tempfile.TemporaryDirectory(prefix="gymflow-agent-logs-") as scratch:
        logs = Path(scratch) / "agent"
        try:
            left = await sandbox.download(recipe.logs, logs)
        except SandboxError:  # an agent that died before writing any: its exit says why
            return
        if left:  # health's `agent_log_refused` reads the count
            episode.counters["agent_logs_refused"] = len(left)
            shown = "; ".join(left[:MAX_LEFT_SHOWN]) + ("; …" if len(left) > MAX_LEFT_SHOWN else "")
            episode.left_out.append(
                f"the agent's logs ({recipe.logs}) held {len(left)} file(s) not taken out of its "
                f"sandbox, so not read as its own account: {shown}"
            )
        if recipe.logged_calls is not None:
            logged = recipe.logged_calls(logs)
            if logged is not None:
                episode.counters["agent_logged_calls"] = logged
        own = atif_trajectory(logs)
        if own is None and recipe.trajectory is not None:
            own = recipe.trajectory(logs, prompt)
        if own:
            episode.trajectory = own


async def _prepare(sandbox: Sandbox, recipe: Recipe, folder: Path, prompt: str) -> None:
    for part, inside in recipe.uploads:
        if (folder / part).is_dir():
            await sandbox.upload(folder / part, inside)
    with tempfile.TemporaryDirectory(prefix="gymflow-instruction-") as scratch:
        path = Path(scratch) / Path(INSTRUCTION_FILE).name
        path.write_text(prompt)
        await sandbox.upload(path, str(Path(INSTRUCTION_FILE).parent))


async def _run(
    sandbox: Sandbox, recipe: Recipe, fill: dict[str, str], env: dict[str, str], timeout_s: float
) -> ExecResult:
    assert recipe.command is not None
    return await sandbox.exec(filled(recipe.command, fill), timeout_s=timeout_s, env=env)


def filled(command: str, fill: dict[str, str]) -> str:
    """`command` with each `{name}` of `fill` replaced by its value, shell-quoted; other braces
    (an awk program, a bash `${VAR}`) are left as they are."""
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, fill)) + r")\}")
    return pattern.sub(lambda match: shlex.quote(fill[match.group(1)]), command)


def _record(
    episode: Episode, recipe: Recipe, result: ExecResult, model_failure: str | None = None
) -> None:
    """The agent's exit as the episode's outcome; its output (tail) as the output text. An
    agent that exits failing after its last model call failed stopped because the model did
    (a prompt over the model's context, a dead server): that call's failure kind is the
    rollout's."""
    episode.output_text = result.output
    episode.num_turns = len({call.call_index for call in episode.calls})
    episode.counters |= {"agent_ms": int(result.seconds * 1000), "model_calls": len(episode.calls)}
    if result.exit_code is not None:
        episode.counters["agent_exit_code"] = result.exit_code
    if result.limit == "timeout":
        _failed(episode, AGENT_TIMEOUT, f"the agent outlived its time limit ({result.seconds}s)")
    elif result.limit == "memory":
        _failed(episode, AGENT_CRASHED, "the agent ran out of memory ([environment] memory_mb)")
    elif result.exit_code in recipe.step_limit_exits:
        _failed(episode, AGENT_STEP_LIMIT, f"the agent stopped at its step limit: {_tail(result)}")
    elif result.exit_code == NOT_FOUND and "command not found" in result.output:
        _failed(episode, AGENT_INSTALL_MISSING, _tail(result))
    elif result.exit_code != 0 and model_failure is not None:
        _failed(episode, model_failure, f"the model call failed, then the agent exited "
                f"{result.exit_code}: {_tail(result)}")  # fmt: skip
    elif result.exit_code != 0:
        _failed(episode, AGENT_CRASHED, f"exit status {result.exit_code}: {_tail(result)}")


async def _in_process(
    recipe: Recipe,
    episode: Episode,
    client: ResponsesClient,
    sandbox: Sandbox,
    session_id: str,
    task: Task,
    prompt: str,
    seed: int | None,
    config: HarnessConfig,
    deadline: float,
) -> Episode:
    import asyncio

    assert recipe.run is not None
    context = AgentContext(client, sandbox, session_id, task, prompt, seed, config, deadline)
    try:
        result: Episode = await asyncio.wait_for(
            recipe.run(context), deadline - time.monotonic() + GRACE_S
        )
    except TimeoutError:
        return _failed(episode, AGENT_TIMEOUT, "the agent outlived its time limit")
    if result.failure_kind is None:
        if time.monotonic() > deadline:
            _failed(result, AGENT_TIMEOUT, "the agent outlived its time limit")
        elif result.counters.get("max_turns_reached"):
            _failed(result, AGENT_STEP_LIMIT, f"harness.max_turns ({config.max_turns}) reached")
    return result


def _failed(episode: Episode, kind: str, message: str) -> Episode:
    episode.failure_kind, episode.error = kind, message
    return episode


def _tail(result: ExecResult, chars: int = 500) -> str:
    return result.output[-chars:].strip()
