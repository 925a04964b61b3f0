"""Agent harnesses: the loops that run a model on a task (`single_turn`, `tool_loop`),
registered by name. Importing this package registers the built-ins.

Cut-off: runs one episode against a model and a resources server; stores nothing. Tier 2."""

from gymflow.harness import single_turn, tool_loop  # noqa: F401
from gymflow.harness.base import HARNESSES, Episode, Harness, get_harness, harness

__tier__ = 2

__all__ = ["HARNESSES", "Episode", "Harness", "base", "get_harness", "harness"]
