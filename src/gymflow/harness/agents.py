"""The agents gymflow installs, as `command` harness recipes: mini-swe-agent and Codex.

Each lives in a prefix of its own found through a variable, as the model venvs are (`.ci/run`
creates them): mini-swe-agent (PyPI) in a venv at `GYMFLOW_MINISWE_VENV`, Codex (`@openai/codex`,
npm) in a prefix at `GYMFLOW_CODEX_PREFIX`. The sandbox shows the system's programs and, read-only,
the recipe's prefix (`installs`; a venv's interpreter with it) and nothing else of the host; it
has its own /tmp and runs the agent as a user of its own, so a prefix must sit outside the
sandbox's folders and be readable by that user: the defaults are under /opt/gymflow-agents.
An agent that is not there is
`agent_install_missing`; its version, read from its package manager's record, is a factor of
the run (`harness.agent_version`).

Both run non-interactively, with no telemetry, and reach no server but the recording proxy
(`{base_url}`, the only network the sandbox has), keeping their own logs in /logs/agent:
- mini-swe-agent 2.x: `mini -y --exit-immediately` with its default `mini.yaml` (a `bash` tool
  over chat completions through LiteLLM), the model `openai/{model}` at `api_base={base_url}`,
  no cost limit (a local model has no price), `step_limit` = `harness.max_turns`, LiteLLM's
  price list read from the package, not fetched, and no retries of its own (LiteLLM's or its
  own: gymflow's client retries, recording each attempt). Stopping at its step limit exits 86
  (`agent_step_limit`). Its trajectory, /logs/agent/mini.traj.json, counts its model calls
  (`info.model_stats.api_calls`).
- Codex: `codex exec` with a custom model provider `gymflow` (`wire_api = "responses"`, the only
  one Codex accepts, streamed), its own sandbox and approvals off (the task's sandbox is the
  boundary), analytics and web search off, no session files (`--ephemeral`), `CODEX_HOME` in
  /logs/agent. Its log (/logs/agent/codex.log, `RUST_LOG=codex_otel=info`) has one
  `codex.api_request` event per HTTP request it made."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from gymflow.core.bounded_files import FileBoundError
from gymflow.core.processes import child_env
from gymflow.harness.agent_logs import codex_trajectory, mini_swe_trajectory, read_log
from gymflow.harness.recipes import AGENT_LOGS, Recipe, register_recipe

#: mini-swe-agent's exit status when it stopped at its step limit (the recipe's own choice).
MINI_STEP_LIMIT_EXIT = 86
#: Sandbox folders a prefix must not be under: the sandbox replaces them with its own.
_SANDBOX_FOLDERS = ("/tmp", "/app", "/logs", "/tests", "/solution", "/run")


def _prefix(variable: str, default: str) -> Path:
    """The prefix, links resolved: the sandbox shows it at that path only."""
    return Path(os.environ.get(variable) or default).resolve()


def _missing(variable: str, default: str, executable: str, hint: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        prefix = _prefix(variable, default)
        path = prefix / executable
        if not os.access(path, os.X_OK):
            return f"{path} is not installed ({variable}={prefix}); install it with: {hint}"
        inside = [
            f for f in _SANDBOX_FOLDERS if str(prefix) == f or str(prefix).startswith(f + "/")
        ]
        if inside:
            return (
                f"{variable}={prefix} is under {inside[0]}, which the sandbox replaces with its "
                "own folder: install the agent elsewhere (the default is under /opt)"
            )
        return None

    return missing


def _pypi_version(variable: str, default: str, package: str) -> Callable[[], str]:
    def version() -> str:
        python = _prefix(variable, default) / "bin" / "python"
        script = f"import importlib.metadata as m; print(m.version({package!r}))"
        try:
            found = subprocess.run(
                [str(python), "-c", script],
                capture_output=True,
                text=True,
                timeout=60,
                env=child_env(),
            )
        except OSError:
            return f"{package} (not installed)"
        return f"{package} {found.stdout.strip()}" if found.returncode == 0 else f"{package} (?)"

    return version


def _npm_version(variable: str, default: str, package: str) -> Callable[[], str]:
    def version() -> str:
        manifest = _prefix(variable, default) / "lib" / "node_modules" / package / "package.json"
        try:
            return f"{package} {json.loads(manifest.read_text())['version']}"
        except (OSError, ValueError, KeyError):
            return f"{package} (not installed)"

    return version


def mini_swe_calls(logs: Path) -> int | None:
    """The model calls mini-swe-agent's own trajectory counts, or None without one."""
    try:
        trajectory = json.loads(read_log(logs / "mini.traj.json"))
        return int(trajectory["info"]["model_stats"]["api_calls"])
    except (OSError, ValueError, KeyError, TypeError, FileBoundError):
        return None


_CODEX_REQUEST = re.compile(r'codex_otel\.log_only: event\.name="codex\.api_request"')


def codex_calls(logs: Path) -> int | None:
    """The HTTP requests Codex's own log says it made, or None without a log."""
    try:
        return len(_CODEX_REQUEST.findall(read_log(logs / "codex.log").decode(errors="replace")))
    except (OSError, FileBoundError):
        return None


MINI_VENV = ("GYMFLOW_MINISWE_VENV", "/opt/gymflow-agents/miniswe-venv")
CODEX_PREFIX = ("GYMFLOW_CODEX_PREFIX", "/opt/gymflow-agents/codex")

_MINI_COMMAND = " ".join(
    [
        f"mkdir -p {AGENT_LOGS};",
        '"$GYMFLOW_AGENT_BIN" -y --exit-immediately -t "$GYMFLOW_INSTRUCTION"',
        f"-m openai/{{model}} -o {AGENT_LOGS}/mini.traj.json -c mini.yaml",
        "-c model.model_kwargs.api_base={base_url}",
        '-c model.model_kwargs.api_key="$OPENAI_API_KEY" -c model.model_kwargs.max_retries=0',
        '-c agent.step_limit="$GYMFLOW_MAX_TURNS" -c agent.cost_limit=0 -c environment.cwd=/app',
        f"</dev/null > {AGENT_LOGS}/mini.log 2>&1; status=$?; tail -c 4000 {AGENT_LOGS}/mini.log;",
        f'grep -q \'"exit_status": "LimitsExceeded"\' {AGENT_LOGS}/mini.traj.json 2>/dev/null',
        f"&& exit {MINI_STEP_LIMIT_EXIT}; exit $status",
    ]
)

_CODEX_COMMAND = " ".join(
    [
        'set -o pipefail; mkdir -p "$CODEX_HOME";',
        '"$GYMFLOW_AGENT_BIN" exec --skip-git-repo-check --ephemeral --json --color=never',
        "--dangerously-bypass-approvals-and-sandbox --cd /app --model {model}",
        "-c model_provider=gymflow -c model_providers.gymflow.name=gymflow",
        "-c model_providers.gymflow.base_url={base_url}",
        "-c model_providers.gymflow.env_key=OPENAI_API_KEY",
        "-c model_providers.gymflow.wire_api=responses",
        "-c model_providers.gymflow.request_max_retries=0",
        "-c model_providers.gymflow.stream_max_retries=0",
        "-c analytics.enabled=false -c web_search=disabled",
        f'"$GYMFLOW_INSTRUCTION" </dev/null 2>{AGENT_LOGS}/codex.log',
        f"| tee {AGENT_LOGS}/codex.jsonl",
    ]
)

MINI_SWE_AGENT = register_recipe(
    Recipe(
        name="mini-swe-agent",
        command=_MINI_COMMAND,
        needs_model=True,
        version=_pypi_version(*MINI_VENV, "mini-swe-agent"),
        missing=_missing(*MINI_VENV, "bin/mini", ".ci/run's GYMFLOW_MINISWE_VENV step"),
        installs=lambda: (_prefix(*MINI_VENV),),
        env=lambda: {
            "GYMFLOW_AGENT_BIN": str(_prefix(*MINI_VENV) / "bin" / "mini"),
            "MSWEA_GLOBAL_CONFIG_DIR": f"{AGENT_LOGS}/mini-swe-agent",
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            # gymflow's client retries (model.max_retries, each attempt recorded): the agent
            # asks once, so its own count and the proxy's are of the same requests
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
        step_limit_exits=(MINI_STEP_LIMIT_EXIT,),
        logged_calls=mini_swe_calls,
        trajectory=lambda logs, instruction: mini_swe_trajectory(logs),
        logs=AGENT_LOGS,
    )
)

CODEX = register_recipe(
    Recipe(
        name="codex",
        command=_CODEX_COMMAND,
        needs_model=True,
        version=_npm_version(*CODEX_PREFIX, "@openai/codex"),
        missing=_missing(*CODEX_PREFIX, "bin/codex", ".ci/run's GYMFLOW_CODEX_PREFIX step"),
        installs=lambda: (_prefix(*CODEX_PREFIX),),
        env=lambda: {
            "GYMFLOW_AGENT_BIN": str(_prefix(*CODEX_PREFIX) / "bin" / "codex"),
            "CODEX_HOME": f"{AGENT_LOGS}/codex-home",
            "RUST_LOG": "codex_otel=info",
            "NO_COLOR": "1",
        },
        logged_calls=codex_calls,
        trajectory=codex_trajectory,
        logs=AGENT_LOGS,
    )
)
