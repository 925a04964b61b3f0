"""What the harness and the collector need from a resources server, in-process or remote."""

from __future__ import annotations

from typing import Any, Protocol

from gymflow.core.errors import RuntimeFailure
from gymflow.core.records import Verification
from gymflow.core.tasks import Task

#: The header a served resources server's session token travels in (environments/asgi.py).
SESSION_TOKEN_HEADER = "X-Gymflow-Session-Token"
#: The header a served resources server's access key travels in, as `bearer(key)`.
ACCESS_KEY_HEADER = "Authorization"


def bearer(key: str) -> str:
    return f"Bearer {key}"


class ToolError(Exception):
    """A tool refused its input. The message goes back to the model as the tool's output."""


class ResourcesUnavailable(RuntimeFailure):
    """A served resources server could not be reached or failed (connection refused, a 5xx):
    the rollout failed for a reason a new attempt may settle, so `--resume` runs it again."""

    kind = "resources_unavailable"


class Resources(Protocol):
    """A resources server: tools, per-rollout sessions and verification. The in-process one
    (environments.resources.ResourcesServer) and the one over HTTP
    (environments.remote.RemoteResourcesServer) both satisfy it, so a harness runs on either."""

    @property
    def verifier_version(self) -> str: ...

    def tools(self) -> list[dict[str, Any]]: ...

    def tools_for(self, task: Task) -> list[dict[str, Any]]: ...

    async def seed_session(self, task: Task) -> str: ...

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        """The tool's output; raises ToolError when the tool refuses its input."""
        ...

    async def verify(
        self, session_id: str, task: Task, output_text: str, trajectory: list[dict[str, Any]]
    ) -> Verification: ...

    async def close_session(self, session_id: str) -> None: ...
