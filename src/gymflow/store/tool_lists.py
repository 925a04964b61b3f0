"""Tool lists stored once: a tool rollout sends the same tool schemas with every model call, and
the Responses API echoes them in every response, so a 3-turn rollout would store its task's
tool list six times. Each distinct list is stored once in `tool_lists`, keyed by a hash of its
JSON text, and the request or response JSON holds `"tools":"@tool_list:<id>"` in its place.

Nothing is lost: `expanded(sql)` puts the list's text back where the reference is, so a reader
gets the request JSON byte for byte as it was sent (the reference sits where the list was, and
the list's text is the same JSON writer's)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

REFERENCE = "@tool_list:"
#: The key and reference as they appear in compact JSON (how every writer of the store writes).
_KEY = '"tools":"' + REFERENCE


def list_id(text: str) -> str:
    """The id a tool list's JSON text is stored under: its hash, so the id a sealed call holds
    binds the text too."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class ToolLists:
    """The tool lists a batch of rows refers to, by id: the writer inserts them with the rows."""

    def __init__(self) -> None:
        self.lists: dict[str, str] = {}

    def refer(self, message: Any, json_of: Callable[[Any], str]) -> str:
        """`message` as JSON text, its non-empty `tools` list replaced by a reference."""
        tools = message.get("tools") if isinstance(message, dict) else None
        if not isinstance(tools, list) or not tools:
            return json_of(message)
        text = json_of(tools)
        tools_id = list_id(text)
        referred = json_of({**message, "tools": REFERENCE + tools_id})
        if referred.count(_KEY) != 1:  # a message that holds such text already stays whole
            return json_of(message)
        self.lists.setdefault(tools_id, text)
        return referred

    def rows(self) -> list[tuple[str, str]]:
        return list(self.lists.items())


def expanded(sql: str) -> str:
    """SQL giving the JSON text `sql` evaluates to with its tool list in place (a column or a
    column of a subquery: it is evaluated three times)."""
    return (
        f"coalesce((SELECT replace({sql}, '{_KEY}' || l.tools_id || '\"', "
        f"'\"tools\":' || l.tools_json) FROM tool_lists l "
        f"WHERE l.tools_id = regexp_extract({sql}, '{_KEY}([0-9a-f]{{32}})\"', 1)), {sql})"
    )
