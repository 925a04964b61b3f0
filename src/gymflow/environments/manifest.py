"""An environment's description: the contents of its `environment.yaml`, and what the modules
below `base.Environment` (the resources server, a verifier worker's reference) read of an
environment, as a Protocol: `base` builds the server, so the server cannot import `base`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gymflow.core.config import refuse_removed
from gymflow.core.registry import DATA, FromData
from gymflow.core.tasks import Task
from gymflow.environments.requirements import Requirement


class VerifierRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # from the data path, only a verifier registered `for_data` (gymflow.core.registry)
    name: Annotated[str, FromData("verifier")]
    params: Annotated[dict[str, Any], DATA] = Field(default_factory=dict)


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


class Described(Protocol):
    """An environment as its resources server and a worker's reference read it: `base.Environment`
    is the one implementation."""

    manifest: EnvironmentManifest
    folder: Path

    @property
    def name(self) -> str: ...

    def tasks(self, split: str | None = None) -> list[Task]: ...
