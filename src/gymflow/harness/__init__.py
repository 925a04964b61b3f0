"""Agent harnesses. Importing this package registers the built-ins."""

from gymflow.harness import command, single_turn, tool_loop  # noqa: F401
from gymflow.harness.base import HARNESSES, Episode, Harness, get_harness, harness

__all__ = ["HARNESSES", "Episode", "Harness", "get_harness", "harness"]
