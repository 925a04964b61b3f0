"""Agent binaries as gymflow runs them: where each is installed, how it is told to use gymflow's
recording proxy, which version it is, and how many model calls its own log says it made.

Each agent lives in a prefix of its own found through a variable, as the model venvs are
(`.ci/run` creates them): mini-swe-agent (PyPI) in a venv at `GYMFLOW_MINISWE_VENV`, Codex
(`@openai/codex`, npm) in a prefix at `GYMFLOW_CODEX_PREFIX`. An agent that is not there is
`agent_install_missing`, a failure of the run's setup, never a reward.

A recipe's command is an argv template: `{base_url}`, `{api_key}`, `{model}`, `{instruction}`,
`{workspace}`, `{logs}` and `{max_turns}` are substituted (each argument is one argv entry, so an
instruction is never parsed by a shell). Both agents run non-interactively, with no telemetry,
and reach no server but `{base_url}`:
- mini-swe-agent 2.x: `mini -y --exit-immediately` with its default `mini.yaml` (a `bash` tool
  over chat completions through LiteLLM), the model `openai/{model}` at `api_base={base_url}`, no
  cost limit (a local model has no price), `step_limit={max_turns}`; LiteLLM's price list read
  from the package, not fetched. Its trajectory (`{logs}/mini.traj.json`) counts its calls in
  `info.model_stats.api_calls`.
- Codex (0.171): `codex exec` with a custom model provider `gymflow` (`wire_api = "responses"`,
  the only one Codex still accepts, streamed), its own sandbox and approvals off (the task's
  sandbox is the boundary), analytics off, web search off, session files not kept
  (`--ephemeral`), `CODEX_HOME` inside the rollout's logs. Its log on stderr
  (`RUST_LOG=codex_otel=info`) has one `codex.api_request` event per HTTP request it made."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gymflow.core.errors import RuntimeFailure


class AgentInstallMissing(RuntimeFailure):
    kind = "agent_install_missing"


@dataclass(frozen=True, slots=True)
class AgentRecipe:
    name: str
    #: the package it is, as its registry names it, and the registry
    package: str
    registry: str
    #: the variable naming its prefix, the prefix used when unset, and how .ci/run makes it
    prefix_variable: str
    default_prefix: str
    install_hint: str
    #: the executable inside the prefix
    executable: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    #: folders the agent needs before it starts (Codex refuses a CODEX_HOME that is missing)
    folders: tuple[str, ...] = ()
    #: the model calls its own log says it made, read from the rollout's logs folder
    #: and the agent's stderr
    logged_calls: Callable[[Path, str], int | None] = lambda logs, stderr: None

    def prefix(self) -> Path:
        return Path(os.environ.get(self.prefix_variable) or self.default_prefix)

    def binary(self) -> Path:
        """The agent's executable, or AgentInstallMissing naming the variable and the fix."""
        path = self.prefix() / self.executable
        if not os.access(path, os.X_OK):
            raise AgentInstallMissing(
                f"{self.name}: {path} is not installed ({self.prefix_variable}="
                f"{self.prefix()}); install it with: {self.install_hint}"
            )
        return path

    def argv(self, **values: str) -> list[str]:
        """The command with `{placeholders}` filled and the executable resolved."""
        return [str(self.binary())] + [part.format(**values) for part in self.command]

    def environment(self, **values: str) -> dict[str, str]:
        """The agent's own variables, with its folders created (under `{logs}`)."""
        for folder in self.folders:
            Path(folder.format(**values)).mkdir(parents=True, exist_ok=True)
        return {key: value.format(**values) for key, value in self.env.items()}

    def version(self) -> str:
        """The installed version, as the package manager recorded it: a factor of the run."""
        return _VERSIONS[self.registry](self)


def _pypi_version(recipe: AgentRecipe) -> str:
    found = subprocess.run(
        [str(recipe.prefix() / "bin" / "python"), "-c",
         f"import importlib.metadata as m; print(m.version({recipe.package!r}))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if found.returncode != 0:
        raise AgentInstallMissing(f"{recipe.name}: {recipe.package} not found in {recipe.prefix()}")
    return found.stdout.strip()


def _npm_version(recipe: AgentRecipe) -> str:
    manifest = recipe.prefix() / "lib" / "node_modules" / recipe.package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError) as exc:
        raise AgentInstallMissing(f"{recipe.name}: {manifest}: {exc}") from None


_VERSIONS: dict[str, Callable[[AgentRecipe], str]] = {"pypi": _pypi_version, "npm": _npm_version}


def mini_swe_calls(logs: Path, stderr: str) -> int | None:
    try:
        trajectory = json.loads((logs / "mini.traj.json").read_text())
        return int(trajectory["info"]["model_stats"]["api_calls"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


_CODEX_REQUEST = re.compile(r'codex_otel\.log_only: event\.name="codex\.api_request"')


def codex_calls(logs: Path, stderr: str) -> int | None:
    return len(_CODEX_REQUEST.findall(stderr))


def _configured(*settings: str) -> tuple[str, ...]:
    """`-c SETTING` for each setting (both agents take their overrides so)."""
    return tuple(part for setting in settings for part in ("-c", setting))


MINI_SWE_AGENT = AgentRecipe(
    name="mini-swe-agent",
    package="mini-swe-agent",
    registry="pypi",
    prefix_variable="GYMFLOW_MINISWE_VENV",
    default_prefix="/tmp/miniswe-venv",
    install_hint="python -m venv /tmp/miniswe-venv && /tmp/miniswe-venv/bin/pip install "
    "mini-swe-agent (.ci/run does)",
    executable="bin/mini",
    command=(
        "-y",
        "--exit-immediately",
        "-t",
        "{instruction}",
        "-m",
        "openai/{model}",
        "-o",
        "{logs}/mini.traj.json",
        *_configured(
            "mini.yaml",
            "model.model_kwargs.api_base={base_url}",
            "model.model_kwargs.api_key={api_key}",
            "agent.step_limit={max_turns}",
            "agent.cost_limit=0",
            "environment.cwd={workspace}",
        ),
    ),
    env={
        "MSWEA_GLOBAL_CONFIG_DIR": "{logs}/mini-swe-agent",
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
    },
    logged_calls=mini_swe_calls,
)

CODEX = AgentRecipe(
    name="codex",
    package="@openai/codex",
    registry="npm",
    prefix_variable="GYMFLOW_CODEX_PREFIX",
    default_prefix="/tmp/codex-prefix",
    install_hint="npm install -g --prefix /tmp/codex-prefix @openai/codex (.ci/run does)",
    executable="bin/codex",
    command=(
        "exec",
        "--skip-git-repo-check",
        "--ephemeral",
        "--json",
        "--color=never",
        "--dangerously-bypass-approvals-and-sandbox",
        "--cd={workspace}",
        "--model={model}",
        *_configured(
            "model_provider=gymflow",
            'model_providers.gymflow.name="gymflow recording proxy"',
            'model_providers.gymflow.base_url="{base_url}"',
            'model_providers.gymflow.env_key="OPENAI_API_KEY"',
            'model_providers.gymflow.wire_api="responses"',
            "model_providers.gymflow.request_max_retries=0",
            "model_providers.gymflow.stream_max_retries=0",
            "analytics.enabled=false",
            'web_search="disabled"',
        ),
        "{instruction}",
    ),
    env={"CODEX_HOME": "{logs}/codex-home", "RUST_LOG": "codex_otel=info", "NO_COLOR": "1"},
    folders=("{logs}/codex-home",),
    logged_calls=codex_calls,
)

#: The agent recipes by name.
AGENTS: dict[str, AgentRecipe] = {recipe.name: recipe for recipe in (MINI_SWE_AGENT, CODEX)}
