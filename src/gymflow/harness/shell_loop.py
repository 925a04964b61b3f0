"""The `tool_loop` recipe: gymflow's own tool loop (gymflow.harness.tool_loop) with one tool,
`shell`, whose commands run in the task's sandbox. Its model calls go through gymflow's own
client, so they are recorded as any tool-loop run's are."""

from __future__ import annotations

import time
from typing import Any

from gymflow.core.protocols import ToolError
from gymflow.core.tasks import Task
from gymflow.harness.recipes import Recipe, _gymflow_version, register_recipe
from gymflow.sandboxes.base import Sandbox, SandboxError

#: One command's time limit, at most (the agent's own limit bounds it too).
COMMAND_TIMEOUT_S = 120.0
#: The output a command hands back to the model, at most (its tail).
OUTPUT_CHARS = 8000

SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": (
        "Run a bash command in the task's workspace (/app) and get its exit code and output. "
        "Each command starts fresh in /app; files persist between commands."
    ),
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the bash command"}},
        "required": ["command"],
        "additionalProperties": False,
    },
}


class ShellTools:
    """The resources a tool loop sees: one `shell` tool over a sandbox, until a deadline."""

    def __init__(self, sandbox: Sandbox, deadline: float) -> None:
        self.sandbox = sandbox
        self.deadline = deadline
        self.commands = 0
        self.sandbox_failure: SandboxError | None = None

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        return [SHELL_TOOL]

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ToolError("the agent's time limit is reached; no more commands run")
        self.commands += 1
        try:
            result = await self.sandbox.exec(
                arguments["command"], timeout_s=min(COMMAND_TIMEOUT_S, left)
            )
        except SandboxError as exc:  # the sandbox failed, not the agent: the rollout stops
            self.sandbox_failure = exc
            raise
        if result.limit is not None:
            status = f"stopped: {result.limit} limit"
        else:
            status = f"exit code {result.exit_code}"
        return f"{status}\n{result.output[-OUTPUT_CHARS:]}"


async def run_tool_loop(context: Any) -> Any:
    from gymflow.harness.tool_loop import tool_loop

    tools = ShellTools(context.sandbox, context.deadline)
    episode = await tool_loop(
        client=context.client,
        server=tools,
        session_id=context.session_id,
        task=context.task,
        prompt=context.prompt,
        seed=context.seed,
        config=context.config,
    )
    episode.counters["shell_commands"] = tools.commands
    if tools.sandbox_failure is not None:
        episode.failure_kind = "sandbox_error"
        episode.error = str(tools.sandbox_failure)
    return episode


register_recipe(
    Recipe(
        name="tool_loop",
        needs_model=True,
        version=_gymflow_version("tool_loop over a shell tool"),
        run=run_tool_loop,
    )
)
