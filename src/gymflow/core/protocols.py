"""What the harness and the collector need from a resources server, in-process or remote."""

from __future__ import annotations


class ToolError(Exception):
    """A tool refused its input. The message goes back to the model as the tool's output."""
