"""A stored trajectory (Responses API items) as display blocks for the report.

Blocks are plain dicts of strings; the template escapes them. Text is clipped so a report's size
is bounded whatever a model wrote; the full trajectory stays in the store and the JSONL export."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gymflow.core.json_text import parse

MAX_TEXT = 3000  # characters per text field shown inline
MAX_ITEMS = 60  # items per trajectory shown inline
# Characters per trajectory shown inline: with the report's 12 sometimes-pass pairs and 5 evidence
# rollouts this bounds the inlined text near 1 MB, whatever the policy wrote.
BUDGET = 30_000
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(slots=True)
class Block:
    kind: str  # message | function_call | function_call_output | reasoning | other
    title: str
    text: str
    clipped: bool = False
    note: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _clip(text: str) -> tuple[str, bool]:
    if len(text) <= MAX_TEXT:
        return text, False
    return text[:MAX_TEXT], True


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or ():
        if isinstance(part, dict):
            text = part.get("text") or part.get("refusal")
            parts.append(text if isinstance(text, str) else json.dumps(part, ensure_ascii=False))
        else:
            parts.append(str(part))
    return "\n".join(parts)


def _arguments(raw: Any) -> tuple[str, str | None]:
    """Pretty JSON arguments, or the raw text with a note when they are not valid JSON."""
    if not isinstance(raw, str):
        return json.dumps(raw, indent=2, ensure_ascii=False), None
    try:
        parsed = parse(raw)
    except json.JSONDecodeError:
        return raw, "arguments are not valid JSON"
    pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
    if _SURROGATE.search(pretty):
        # a `\ud800` escape in the model's arguments: shown as written, since the lone
        # surrogate it parses to cannot be written to the UTF-8 report
        return json.dumps(parsed, indent=2), None
    return pretty, None


def _block(item: Any) -> Block:
    if not isinstance(item, dict):
        text, clipped = _clip(json.dumps(item, ensure_ascii=False, default=str))
        return Block("other", "item", text, clipped)
    kind = item.get("type", "message")
    if kind == "message":
        text, clipped = _clip(_content_text(item.get("content")))
        return Block("message", str(item.get("role", "assistant")), text, clipped)
    if kind == "function_call":
        args, note = _arguments(item.get("arguments", ""))
        text, clipped = _clip(args)
        return Block(
            "function_call",
            f"tool call: {item.get('name', '?')}",
            text,
            clipped,
            note,
            {"call_id": str(item.get("call_id", ""))},
        )
    if kind == "function_call_output":
        output = item.get("output", "")
        raw = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        text, clipped = _clip(raw)
        return Block(
            "function_call_output",
            "tool output",
            text,
            clipped,
            extra={"call_id": str(item.get("call_id", ""))},
        )
    if kind == "reasoning":
        pieces = [_content_text(item.get("summary")), _content_text(item.get("content"))]
        text, clipped = _clip("\n".join(p for p in pieces if p))
        return Block("reasoning", "reasoning", text, clipped)
    text, clipped = _clip(json.dumps(item, indent=2, ensure_ascii=False, default=str))
    return Block("other", str(kind), text, clipped)


def blocks(trajectory_json: str | None) -> tuple[list[Block], int]:
    """The display blocks of a stored trajectory and how many items were left out."""
    try:
        items = parse(trajectory_json) if trajectory_json else []
    except json.JSONDecodeError:
        text, clipped = _clip(trajectory_json or "")
        return [Block("other", "unreadable trajectory JSON", text, clipped)], 0
    if not isinstance(items, list):
        items = [items]
    shown: list[Block] = []
    used = 0
    for item in items[:MAX_ITEMS]:
        if used >= BUDGET:
            break
        block = _block(item)
        used += len(block.text)
        shown.append(block)
    return shown, len(items) - len(shown)
