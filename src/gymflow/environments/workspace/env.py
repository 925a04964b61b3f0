"""The entry point a verifier worker imports to rebuild a workspace benchmark's environment."""

from gymflow.environments.workspace.environment import WorkspaceEnvironment

__all__ = ["WorkspaceEnvironment"]
