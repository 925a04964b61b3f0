"""The entry point a verifier worker imports to rebuild a dataset benchmark's environment."""

from gymflow.environments.dataset.environment import DatasetEnvironment

__all__ = ["DatasetEnvironment"]
