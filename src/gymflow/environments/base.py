"""What an environment is: a manifest, its tasks, and a resources server holding session state."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gymflow.core.errors import UserError
from gymflow.core.tasks import Task
from gymflow.environments.manifest import (
    REMOVED_FIELDS,
    EnvironmentManifest,
    SplitSpec,
    VerifierRef,
)
from gymflow.environments.requirements import check_installed
from gymflow.environments.resources import ResourcesServer

# the manifest's models are imported from here by many; they are defined in `manifest`
__all__ = [
    "REMOVED_FIELDS",
    "DuplicateTaskId",
    "Environment",
    "EnvironmentManifest",
    "SplitSpec",
    "UnknownSplit",
    "VerifierRef",
]


class UnknownSplit(UserError, KeyError):
    """A split the environment does not have (a KeyError, as a lookup by name is one)."""


class DuplicateTaskId(UserError, ValueError):
    """A split whose rows repeat a task id: the store keys rollouts by it."""


class Environment:
    """Base class of every environment. Subclasses load tasks and may bring tools.

    Instances are cheap; tasks are loaded on demand and cached per split."""

    #: Whether a run's benchmark version covers the split's rows and the verifier's version:
    #: true for an environment whose rows and verifier live outside gymflow (NeMo Gym's), where
    #: the environment's name alone does not pin them.
    rows_are_protocol = False

    def __init__(self, manifest: EnvironmentManifest, folder: Path) -> None:
        self.manifest = manifest
        self.folder = folder
        self._tasks: dict[str, list[Task]] = {}

    @property
    def name(self) -> str:
        return self.manifest.name

    def generate(self, split: str) -> list[Task]:
        """Return every task of a split. Subclasses implement it."""
        raise NotImplementedError

    def tasks(self, split: str | None = None) -> list[Task]:
        """A split's tasks (the manifest's default split when None), generated once and cached."""
        split = split or self.manifest.default_split
        if split not in self.manifest.splits:
            known = ", ".join(sorted(self.manifest.splits))
            raise UnknownSplit(
                f"environment {self.name!r} has no split {split!r} (splits: {known})"
            )
        if split not in self._tasks:
            check_installed(self.name, self.manifest.requires)
            tasks = self.generate(split)
            _check_unique_ids(self.name, split, tasks)
            self._tasks[split] = tasks
        return self._tasks[split]

    def dataset_version(self, split: str) -> str:
        """A hash of a split's content, so a changed dataset is a changed benchmark."""
        digest = hashlib.sha256()
        for task in self.tasks(split):
            digest.update(task.task_id.encode())
            digest.update(json.dumps(task.data, sort_keys=True, default=str).encode())
        return digest.hexdigest()[:12]

    def refusals(self, verifier_params: dict[str, Any]) -> list[str]:
        """Why a run of this environment cannot start its resources, said before anything
        starts (`gym env validate`, `gym eval run`); none for most environments."""
        return []

    def resources_server(self, verifier_params: dict[str, Any] | None = None) -> ResourcesServer:
        """The server that holds this environment's tools, sessions and verification."""
        return ResourcesServer(self, verifier_params)


def _check_unique_ids(env: str, split: str, tasks: list[Task]) -> None:
    seen: dict[str, int] = {}
    for row, task in enumerate(tasks):
        if task.task_id in seen:
            raise DuplicateTaskId(
                f"environment {env!r} split {split!r}: row {row} repeats task_id "
                f"{task.task_id!r} of row {seen[task.task_id]}"
            )
        seen[task.task_id] = row
