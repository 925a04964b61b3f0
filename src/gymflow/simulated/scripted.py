"""The scripted model: drives a real shell agent through a workspace task's reference solution.

An agent binary (mini-swe-agent, Codex) wraps the task's instruction in prompts of its own, so the
task is found by its instruction appearing anywhere in the conversation's system, developer or
user text. The first answer calls the agent's shell tool with the task's `solution/solve.sh` run
as a here-document (the agent has no /solution folder); once that call has an output, the answer
finishes the way the agent expects: mini-swe-agent's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
where the prompt names it, else a text answer with no tool call (Codex ends its turn on one).

The shell tool is recognised by its schema, not its name alone: a function with a string
`command` or `cmd` parameter (mini-swe-agent's `bash`, Codex's `exec_command`), or an array
`command` (an argv, given `["bash", "-lc", script]`). An agent that offers no such tool gets the
script as a fenced bash block in text. Pure functions; `policy_server` serves them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.core.errors import UserError

#: The line that ends mini-swe-agent's run when a command prints it first.
MINI_SWE_FINISH = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: What a scripted run says when it is done, and what it says for a task it does not know.
DONE_TEXT = "Done: I ran the task's reference solution (a scripted model)."
UNKNOWN_TEXT = "I am a scripted model and do not know this task."
_HEREDOC = "SOLUTION_SH_END"


@dataclass(frozen=True, slots=True)
class ScriptedTask:
    name: str
    instruction: str
    solution: str  # solution/solve.sh as written


class ScriptError(UserError, ValueError):
    """A task folder the scripted model cannot drive, naming the folder and the file."""


def load_scripted_tasks(folder: Path) -> list[ScriptedTask]:
    """Every task under `folder` (Harbor's layout: NAME/instruction.md, NAME/solution/solve.sh),
    or `folder` itself when it is one task."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ScriptError(f"{folder}: not a folder of workspace tasks")
    candidates = [folder] if (folder / "instruction.md").is_file() else sorted(folder.iterdir())
    tasks = []
    for task in candidates:
        if not (task / "instruction.md").is_file():
            continue
        solve = task / "solution" / "solve.sh"
        if not solve.is_file():
            raise ScriptError(f"{task}: no solution/solve.sh to script the model from")
        instruction = (task / "instruction.md").read_text(encoding="utf-8").strip()
        if not instruction:
            raise ScriptError(f"{task / 'instruction.md'}: empty instruction")
        tasks.append(ScriptedTask(task.name, instruction, solve.read_text(encoding="utf-8")))
    if not tasks:
        raise ScriptError(f"{folder}: no task folder (NAME/instruction.md) in it")
    return tasks


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def _prompt_text(items: list[dict[str, Any]]) -> str:
    return "\n".join(
        _text(item.get("content"))
        for item in items
        if item.get("type", "message") == "message"
        and item.get("role") in ("system", "developer", "user")
    )


def find_task(tasks: Sequence[ScriptedTask], items: list[dict[str, Any]]) -> ScriptedTask | None:
    """The task whose instruction the conversation quotes (the longest, should one contain
    another)."""
    text = _prompt_text(items)
    found = [task for task in tasks if task.instruction in text]
    return max(found, key=lambda task: len(task.instruction)) if found else None


def shell_tool(tools: Sequence[dict[str, Any]]) -> tuple[str, str, bool] | None:
    """(name, parameter, takes an argv) of the first shell-like function tool offered."""
    for tool in tools:
        if tool.get("type") != "function":
            continue
        properties = (tool.get("parameters") or {}).get("properties") or {}
        for parameter in ("command", "cmd"):
            kind = (properties.get(parameter) or {}).get("type")
            if kind in ("string", "array"):
                return tool.get("name", ""), parameter, kind == "array"
    return None


def solution_command(task: ScriptedTask) -> str:
    """The task's solve.sh as one shell command: bash reading it from a here-document."""
    script = task.solution if task.solution.endswith("\n") else task.solution + "\n"
    return f"bash <<'{_HEREDOC}'\n{script}{_HEREDOC}"


def _shell_call(tool: tuple[str, str, bool], command: str) -> list[dict[str, Any]]:
    name, parameter, argv = tool
    value: Any = ["bash", "-lc", command] if argv else command
    return [{"name": name, "arguments": {parameter: value}}]


def _calls_made(items: list[dict[str, Any]]) -> list[str]:
    """The argument text of every function call made so far."""
    return [str(item.get("arguments", "")) for item in items if item.get("type") == "function_call"]


def scripted_step(
    tasks: Sequence[ScriptedTask], items: list[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> list[dict[str, Any]] | str:
    """The scripted model's next step in the conversation `items`: tool calls or a text answer."""
    task = find_task(tasks, items)
    if task is None:
        return UNKNOWN_TEXT
    tool = shell_tool(tools)
    made = _calls_made(items)
    if tool is None:
        answered = any(
            _HEREDOC in _text(item.get("content"))
            for item in items
            if item.get("type", "message") == "message" and item.get("role") == "assistant"
        )
        return DONE_TEXT if answered else f"```bash\n{solution_command(task)}\n```"
    if not made:
        return _shell_call(tool, solution_command(task))
    wants_finish = MINI_SWE_FINISH in _prompt_text(items)
    if wants_finish and not any(MINI_SWE_FINISH in arguments for arguments in made):
        return _shell_call(tool, f"echo {MINI_SWE_FINISH}")
    return DONE_TEXT
