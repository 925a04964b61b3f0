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
    """A tool refused its input. The message goes back to the model as the tool's output
    (`error: <message>`), or `output` as it is: a protocol whose agents hand a tool's answer
    back as it came (NeMo Gym's hands a route's body over whatever its status) gives it."""

    def __init__(self, message: str, *, output: str | None = None) -> None:
        super().__init__(message)
        self.output = output

    def model_output(self) -> str:
        """What the model reads as the tool's output."""
        return f"error: {self}" if self.output is None else self.output


class ToolServerError(ToolError):
    """The tool's server failed on the call (a NeMo Gym tool route answering 500), and its
    protocol's agent goes on: the answer goes back to the model as the tool's output, as NeMo
    Gym's simple agent passes it, so rewards are NeMo Gym's; the message (route, status, the
    server's log) is kept on the rollout as the failure it is (`counters.tool_server_errors`,
    the rollout's `error`), never taken for the model's doing."""


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
