"""A benchmark: a versioned evaluation protocol over an environment (`benchmarks/NAME.yaml`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gymflow.core.config import MAX_REPEATS, Sampling
from gymflow.environments.dataset.spec import DatasetSpec
from gymflow.environments.manifest import VerifierRef


class Benchmark(BaseModel):
    """A versioned evaluation protocol over an environment (`benchmarks/NAME.yaml`).

    With `dataset` (and `verifier`) the benchmark defines its own environment, named after it,
    over the rows of a file or a Hub dataset (`gymflow.environments.dataset`)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    environment: str = Field("", description="the environment; a dataset benchmark's own name")
    dataset: DatasetSpec | None = None
    verifier: VerifierRef | None = Field(None, description="a dataset benchmark's verifier")
    workspace: str | None = Field(
        None, description="a folder of Harbor tasks (relative to this file): a workspace benchmark"
    )
    split: str | None = None
    limit: int | None = Field(None, ge=1)
    prompt_template: str | None = None
    repeats: int = Field(1, ge=1, le=MAX_REPEATS)
    sampling: Sampling = Sampling()
    verifier_params: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)

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
