"""What an environment is: a manifest, its tasks, and a resources server holding session state."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gymflow.config import refuse_removed
from gymflow.core.tasks import Task
from gymflow.environments.requirements import Requirement, check_installed
from gymflow.errors import UserError


class VerifierRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class SplitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    size: int | None = None


class EnvironmentManifest(BaseModel):
    """The contents of `environment.yaml`."""

    # a NaN pass threshold fails every rollout (reward >= NaN is false), -inf passes every one
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = Field(pattern=r"^[a-z][a-z0-9_\-]*$")
    description: str
    domain: str
    tags: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    verifier: VerifierRef
    reward_range: tuple[float, float] = (0.0, 1.0)
    pass_threshold: float = 1.0
    reverify_stateless: bool = True
    harness: str = "single_turn"
    prompt_template: str
    splits: dict[str, SplitSpec]
    default_split: str
    id_field: str = "task_id"
    entrypoint: str = Field("env:Environment", description="module:class inside the folder")
    requires: list[Requirement] = Field(
        default_factory=list, description="Python packages the tasks come from, with their install"
    )

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return refuse_removed(data, REMOVED_FIELDS)


#: Fields an environment or dataset once set and no longer may, with what replaces them.
REMOVED_FIELDS = {
    "verify_timeout_s": "a verifier declares how it runs and its bound where it is defined: "
    "@verifier(name, runs='worker', timeout_s=...)",
}


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

    def resources_server(self, verifier_params: dict[str, Any] | None = None):
        """The server that holds this environment's tools, sessions and verification."""
        from gymflow.environments.resources import ResourcesServer

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
