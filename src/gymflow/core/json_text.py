"""JSON text from outside gymflow's own memory (a store's columns, a file beside a run) parsed
with one kind of failure. Python's `json.loads` raises RecursionError, not a decode error, on
valid JSON nested about a thousand deep, so every `except ValueError` around a stored value let
one such value through as a crash: a config nested 100,000 deep in one store ended every
command on it, `gym runs list` for the whole folder, in "this is a gymflow bug" (attack pass 4,
a04)."""

from __future__ import annotations

import json
from typing import Any


def parse(text: str | bytes | bytearray) -> Any:
    """`json.loads(text)`; too deeply nested is a `json.JSONDecodeError` like any bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        shown = text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deep to read", shown, 0) from None
