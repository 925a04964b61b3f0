"""The scripted model's steps on the conversations agents send (their own wrapping of the
instruction, their own shell tools), and the task folders it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.simulated.scripted import (
    DONE_TEXT,
    MINI_SWE_FINISH,
    UNKNOWN_TEXT,
    ScriptedTask,
    ScriptError,
    load_scripted_tasks,
    scripted_step,
)

TASK = ScriptedTask("t", "Write hello to a.txt", "echo hello > a.txt\n")
BASH = {"type": "function", "name": "bash",
        "parameters": {"properties": {"command": {"type": "string"}}}}  # fmt: skip
ARGV = {"type": "function", "name": "shell",
        "parameters": {"properties": {"command": {"type": "array"}}}}  # fmt: skip


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_the_solution_goes_through_the_agents_own_shell_tool() -> None:
    wrapped = [_user(f"Please solve this issue: {TASK.instruction}\nFinish with echo X")]
    (call,) = scripted_step([TASK], wrapped, [BASH])
    assert call["name"] == "bash"
    assert (
        call["arguments"]["command"].startswith("bash <<'")
        and "echo hello" in call["arguments"]["command"]
    )
    (argv,) = scripted_step([TASK], wrapped, [ARGV])
    assert argv["arguments"]["command"][:2] == ["bash", "-lc"]


def test_it_finishes_as_the_agent_expects() -> None:
    made = {"type": "function_call", "call_id": "c", "name": "bash", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c", "output": "ok"}
    mini = [_user(f"{TASK.instruction} then `echo {MINI_SWE_FINISH}`"), made, output]
    (finish,) = scripted_step([TASK], mini, [BASH])
    assert finish["arguments"]["command"] == f"echo {MINI_SWE_FINISH}"
    finished = {**made, "arguments": json.dumps({"command": f"echo {MINI_SWE_FINISH}"})}
    assert scripted_step([TASK], [*mini, finished, output], [BASH]) == DONE_TEXT
    assert scripted_step([TASK], [_user(TASK.instruction), made, output], [BASH]) == DONE_TEXT


def test_without_a_shell_tool_the_script_is_a_bash_block() -> None:
    first = scripted_step([TASK], [_user(TASK.instruction)], [])
    assert isinstance(first, str) and first.startswith("```bash\n")
    said = {"type": "message", "role": "assistant", "content": first}
    assert scripted_step([TASK], [_user(TASK.instruction), said], []) == DONE_TEXT


def test_an_unknown_task_is_said_so() -> None:
    assert scripted_step([TASK], [_user("something else")], [BASH]) == UNKNOWN_TEXT


def test_task_folders_it_cannot_script_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "instruction.md").write_text("do it")
    with pytest.raises(ScriptError, match=r"a: no solution/solve.sh"):
        load_scripted_tasks(tmp_path)
    with pytest.raises(ScriptError, match="not a folder"):
        load_scripted_tasks(tmp_path / "missing")
