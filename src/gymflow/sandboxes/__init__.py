"""Sandboxes for workspace tasks, behind one interface (`Sandbox`: start, exec, upload, download,
stop), chosen by name: bubblewrap here, a container engine where one exists.

Cut-off: runs commands in an isolated workspace and moves files in and out; knows nothing of
models, verifiers' verdicts or stores. Tier 2, above `verifiers`, whose code sandbox it shares."""

from gymflow.sandboxes.base import ExecResult, Sandbox, SandboxError, SandboxSpec
from gymflow.sandboxes.choice import SANDBOXES, sandbox_kind

__tier__ = 2

__all__ = [
    "SANDBOXES",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "base",
    "bubblewrap",
    "choice",
    "container",
    "model_bridge",
    "model_socket",
    "sandbox_kind",
    "taken_out",
]
