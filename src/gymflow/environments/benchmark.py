"""A benchmark: a versioned evaluation protocol over an environment (`benchmarks/NAME.yaml`)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gymflow.core.config import MAX_REPEATS, Sampling
from gymflow.core.registry import DATA, FromData
from gymflow.environments.dataset.spec import DatasetSpec
from gymflow.environments.manifest import VerifierRef


class Benchmark(BaseModel):
    """A versioned evaluation protocol over an environment (`benchmarks/NAME.yaml`).

    With `dataset` (and `verifier`) the benchmark defines its own environment, named after it,
    over the rows of a file or a Hub dataset (`gymflow.environments.dataset`)."""

    # What a file found only on the data path may set (`DATA`) or choose (`FromData`), read by
    # `environments.registry.beyond_data`. A workspace's tasks are data to gymflow: their tests
    # and images run only in the task's sandbox, as the agent's code does.
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, DATA]
    description: Annotated[str, DATA] = ""
    environment: Annotated[str, FromData("environment")] = Field(
        "", description="the environment; a dataset benchmark's own name"
    )
    dataset: Annotated[DatasetSpec | None, DATA] = None
    verifier: Annotated[VerifierRef | None, DATA] = Field(
        None, description="a dataset benchmark's verifier"
    )
    workspace: Annotated[str | None, DATA] = Field(
        None, description="a folder of Harbor tasks (relative to this file): a workspace benchmark"
    )
    split: Annotated[str | None, DATA] = None
    limit: Annotated[int | None, DATA] = Field(None, ge=1)
    prompt_template: Annotated[str | None, DATA] = None
    repeats: Annotated[int, DATA] = Field(1, ge=1, le=MAX_REPEATS)
    sampling: Annotated[Sampling, DATA] = Sampling()
    verifier_params: Annotated[dict[str, Any], DATA] = Field(default_factory=dict)
    tags: Annotated[list[str], DATA] = Field(default_factory=list)

    @model_validator(mode="after")
    def _environment(self) -> Benchmark:
        if self.workspace is not None:
            if self.dataset is not None or self.verifier is not None:
                raise ValueError(
                    "workspace: its tasks bring their own tests (no dataset, verifier)"
                )
            if self.environment not in ("", self.name):
                raise ValueError(
                    f"environment: a workspace benchmark defines its own environment, {self.name!r}"
                )
            self.environment = self.name
            return self
        if self.dataset is None:
            if not self.environment:
                raise ValueError("environment: required (or give a dataset and a verifier)")
            if self.verifier is not None:
                raise ValueError("verifier: only a dataset benchmark names its verifier")
            return self
        if self.verifier is None:
            raise ValueError("verifier: a dataset benchmark names its verifier")
        if self.environment not in ("", self.name):
            raise ValueError(
                f"environment: a dataset benchmark defines its own environment, {self.name!r}"
            )
        self.environment = self.name
        return self

    def version(self, dataset_version: str | None = None) -> str:
        """A change to split, template, repeats, sampling or verifier params is a new version;
        for a dataset benchmark, so is a change to its rows (`dataset_version`, which covers the
        Hub commit), shown after a dot so a comparison can tell that only the rows changed."""
        protocol = self.model_dump(mode="json", exclude={"description", "tags"})
        if self.workspace is None:  # the field came later: every older benchmark keeps its version
            protocol.pop("workspace")
        if self.dataset is not None:  # where the file lies is not the protocol; its rows are
            protocol["dataset"].pop("path")
            if protocol["dataset"]["format"] != "nemo_gym":  # the same rows in any file format
                protocol["dataset"].pop("format")
        digest = hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()[:12]
        return f"{digest}.{dataset_version}" if dataset_version else digest
