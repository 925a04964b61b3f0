"""Sandboxes for workspace tasks, behind one interface (`Sandbox`), chosen by name."""

from gymflow.sandboxes.base import ExecResult, Sandbox, SandboxError, SandboxSpec
from gymflow.sandboxes.choice import SANDBOXES, sandbox_kind

__all__ = ["SANDBOXES", "ExecResult", "Sandbox", "SandboxError", "SandboxSpec", "sandbox_kind"]
