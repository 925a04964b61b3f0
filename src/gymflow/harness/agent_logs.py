"""An external agent's own account of its run, read from the logs it left, as Responses API
items: the rollout's trajectory (the model calls the proxy recorded are the other account, and
health's `text_without_call` sets one against the other).

- An ATIF file (`trajectory.json`, where Harbor's agents write theirs) is read by
  `gymflow.core.atif.atif_to_items`, whichever agent wrote it.
- mini-swe-agent's trajectory (`mini.traj.json`): its chat messages (system, user, assistant
  with tool calls, tool results) through the chat adapter; its `exit` message is not a message.
- Codex's `--json` events (`codex.jsonl`): each completed item, an agent message as an
  assistant message, a command run as the call and its output, reasoning as reasoning.
Pure functions over the folder of logs; a log that is missing or unreadable gives None. Each
is read through `read_log`: the folder came out of the agent's sandbox (`Sandbox.download` takes
no link out), and a log is still opened without following one, and read within the bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gymflow.core.atif import AtifError, atif_to_items
from gymflow.core.bounded_files import FileBoundError, read_bounded
from gymflow.core.config import MAX_TEXT_BYTES
from gymflow.models.chat_adapter import chat_to_request

#: Where an agent that writes ATIF puts it, as Harbor's agents do (under /logs/agent).
ATIF_FILE = "trajectory.json"
_CHAT_ROLES = ("system", "user", "assistant", "tool")


def read_log(path: Path) -> bytes:
    """A log the agent left: a regular file within MAX_TEXT_BYTES, never through a link;
    FileBoundError (or OSError) otherwise."""
    return read_bounded(path, MAX_TEXT_BYTES)


def atif_trajectory(logs: Path) -> list[dict[str, Any]] | None:
    path = logs / ATIF_FILE
    try:
        document = json.loads(read_log(path))
        return atif_to_items(document, source=str(path))
    except (OSError, ValueError, AtifError, FileBoundError):
        return None


def mini_swe_trajectory(logs: Path) -> list[dict[str, Any]] | None:
    try:
        messages = json.loads(read_log(logs / "mini.traj.json"))["messages"]
        chat = [
            {key: value for key, value in message.items() if key != "extra"}
            for message in messages
            if isinstance(message, dict) and message.get("role") in _CHAT_ROLES
        ]
        return chat_to_request({"messages": chat})["input"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, FileBoundError):
        return None


def _codex_item(item: dict[str, Any]) -> list[dict[str, Any]]:
    kind, item_id = item.get("type"), str(item.get("id", ""))
    if kind == "agent_message":
        text = str(item.get("text", ""))
        content = [{"type": "output_text", "text": text, "annotations": []}]
        return [{"type": "message", "role": "assistant", "content": content}]
    if kind == "reasoning":
        return [
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": item.get("text", "")}],
            }
        ]
    if kind == "command_execution":
        arguments = json.dumps({"cmd": item.get("command", "")})
        call = {"type": "function_call", "call_id": item_id, "name": "exec_command"}
        return [
            {**call, "arguments": arguments},
            {"type": "function_call_output", "call_id": item_id,
             "output": str(item.get("aggregated_output", ""))},
        ]  # fmt: skip
    return []


def codex_trajectory(logs: Path, instruction: str) -> list[dict[str, Any]] | None:
    try:
        lines = read_log(logs / "codex.jsonl").decode(errors="replace").splitlines()
    except (OSError, FileBoundError):
        return None
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": instruction}]
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "item.completed":
            item = event.get("item")
            if isinstance(item, dict):
                items.extend(_codex_item(item))
    return items if len(items) > 1 else None
