"""Agent recipes for the `command` harness: how to run one agent in a task's sandbox.

A recipe names an agent: the command line it runs in the sandbox (with `{base_url}`,
`{api_key}`, `{model}`, `{instruction}` and the others gymflow.harness.command names filled in;
the instruction is also in $GYMFLOW_INSTRUCTION), what it
needs uploaded first, whether it talks to a model (then the run's recording proxy is its only
endpoint, exported as OPENAI_BASE_URL and OPENAI_API_KEY), how to tell it is installed, and its
version (package and version), which the run records as a factor. Recipes that run in gymflow's
own process (`tool_loop`) give `run` instead of a command line.

Built in: `oracle` (runs the task's solution/solve.sh: every task must pass under it),
`nothing` (does nothing: no task may pass under it) and `tool_loop` (gymflow's own tool loop
over one shell tool). Others register with `register_recipe` (the agents gymflow installs are
registered by their own modules)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymflow.core.errors import UserError

#: Where an agent keeps its own logs inside the sandbox, and where its instruction is written.
AGENT_LOGS = "/logs/agent"
INSTRUCTION_FILE = f"{AGENT_LOGS}/instruction.md"


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    #: the agent's command line (bash), or None for an in-process recipe (`run`)
    command: str | None = None
    needs_model: bool = False
    #: host folders of the task uploaded before the agent starts: (task folder part, inside)
    uploads: tuple[tuple[str, str], ...] = ()
    #: the agent's package and version, as the run records it
    version: Callable[[], str] = lambda: "unknown"
    #: why the agent cannot run here (None when it can): not installed, a variable not set
    missing: Callable[[], str | None] = lambda: None
    #: extra environment for the command (an install prefix's bin on PATH)
    env: Callable[[], dict[str, str]] = field(default=lambda: {})
    #: host folders the agent runs from (its install prefix), which the sandbox shows read-only;
    #: beyond them it shows the system's programs only
    installs: Callable[[], tuple[Path, ...]] = field(default=lambda: ())
    #: exit statuses that mean the agent stopped at its own step limit
    step_limit_exits: tuple[int, ...] = ()
    #: an in-process agent: run(context) -> Episode (see gymflow.harness.command)
    run: Callable[[Any], Awaitable[Any]] | None = None
    #: the folder inside the sandbox where the agent keeps its own logs (downloaded after it
    #: ran), and the model calls those logs say it made (None: they do not say)
    logs: str | None = None
    logged_calls: Callable[[Path], int | None] | None = None
    #: the agent's own account of the run as Responses items, from its logs and instruction
    #: (an ATIF `trajectory.json` there is read for any agent: gymflow.harness.agent_logs)
    trajectory: Callable[[Path, str], list[dict[str, Any]] | None] | None = None


RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    RECIPES[recipe.name] = recipe
    return recipe


def _gymflow_version(agent: str) -> Callable[[], str]:
    def version() -> str:
        from gymflow import __version__

        return f"gymflow {__version__} ({agent})"

    return version


register_recipe(
    Recipe(
        name="oracle",
        command="bash /solution/solve.sh",
        uploads=(("solution", "/solution"),),
        version=_gymflow_version("oracle: the task's solution/solve.sh"),
    )
)
register_recipe(Recipe(name="nothing", command="true", version=_gymflow_version("nothing")))


def get_recipe(name: str) -> Recipe:
    _load_installed()
    try:
        return RECIPES[name]
    except KeyError:
        known = ", ".join(sorted(RECIPES))
        raise UserError(f"harness.agent: unknown agent recipe {name!r} (known: {known})") from None


def own_command(command: str, version: str | None) -> Recipe:
    """A recipe for a command line the config gives (`harness.command`): it talks to the model
    if it names `{base_url}` (or reads OPENAI_BASE_URL, which it always gets)."""
    return Recipe(
        name="command",
        command=command,
        needs_model=True,
        logs=AGENT_LOGS,  # where an ATIF trajectory.json of its own is read from
        version=lambda: version or "unrecorded (set harness.agent_version)",
    )


def _load_installed() -> None:
    """Import the modules that register recipes beyond the built-ins (the tool loop's, and the
    external agents' where their module exists)."""
    import importlib

    for module in ("gymflow.harness.shell_loop", "gymflow.harness.agents"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
