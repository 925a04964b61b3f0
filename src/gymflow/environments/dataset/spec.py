"""The `dataset:` key of a benchmark YAML: where the rows are and which field means what."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gymflow.core.config import refuse_removed
from gymflow.core.registry import DATA, FromData
from gymflow.environments.manifest import REMOVED_FIELDS

#: Local file formats, by suffix; `nemo_gym` is a JSONL file of NeMo Gym dataset rows, and a
#: path without a suffix is a folder written by the `datasets` package's `save_to_disk`.
SUFFIXES = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".csv": "csv",
    "": "save_to_disk",
}
Format = Literal["jsonl", "parquet", "csv", "nemo_gym", "save_to_disk"]


class HubSource(BaseModel):
    """A Hugging Face Hub dataset; `revision` (a commit, tag or branch) is resolved to the commit
    it names, and that commit is part of the benchmark's version."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, DATA] = Field(min_length=1, description="repo id, e.g. openai/gsm8k")
    config: Annotated[str | None, DATA] = Field(
        default=None, description="the dataset's configuration (subset)"
    )
    split: Annotated[str, DATA] = "test"
    revision: Annotated[str, DATA] = Field(default="main", min_length=1)


class FieldMap(BaseModel):
    """Row field paths (`a.b.0.c` reads nested objects and lists) for each role.

    `prompt` and `verifier` map a name the template or verifier reads to a row field; a list
    means the same name in both places."""

    model_config = ConfigDict(extra="forbid")
    id: Annotated[str | None, DATA] = Field(
        default=None, description="the row's own id; else a hash of its content"
    )
    prompt: Annotated[dict[str, str], DATA] = Field(default_factory=dict)
    verifier: Annotated[dict[str, str], DATA] = Field(default_factory=dict)
    tags: Annotated[str | None, DATA] = Field(default=None, description="a text or a list of texts")
    difficulty: Annotated[str | None, DATA] = None
    reference: Annotated[str | None, DATA] = Field(
        default=None, description="a response that passes, for the local simulated policy"
    )
    tools: Annotated[str | None, DATA] = Field(
        default=None, description="Responses API function tools offered"
    )

    @field_validator("prompt", "verifier", mode="before")
    @classmethod
    def _same_names(cls, value: object) -> object:
        if isinstance(value, list):
            return {name: name for name in value}
        return value


class DatasetSpec(BaseModel):
    """Exactly one of `path` (relative to the benchmark YAML) or `hub`."""

    # pass_threshold: .nan would fail every rollout, -.inf pass every one
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # what a file found only on the data path may set (gymflow.core.registry.FromData)
    path: Annotated[str | None, DATA] = None
    hub: Annotated[HubSource | None, DATA] = None
    format: Annotated[Format | None, DATA] = Field(
        default=None,
        description="jsonl, parquet, csv, save_to_disk (a folder; from the suffix when unset) "
        "or nemo_gym",
    )
    split: Annotated[str, DATA] = Field(
        default="test", description="the split name a local file is known by"
    )
    fields: Annotated[FieldMap, DATA] = FieldMap()
    harness: Annotated[str, FromData("harness")] = "single_turn"
    domain: Annotated[str, DATA] = "dataset"
    pass_threshold: Annotated[float | None, DATA] = Field(
        default=None, description="default: the verifier's own"
    )

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return refuse_removed(data, REMOVED_FIELDS)

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSpec:
        if (self.path is None) == (self.hub is None):
            raise ValueError("give exactly one of dataset.path or dataset.hub")
        if self.path is not None and self.format is None:
            suffix = Path(self.path).suffix.lower()
            if suffix not in SUFFIXES:
                known = ", ".join(sorted(SUFFIXES))
                raise ValueError(
                    f"dataset.path {self.path!r}: unknown suffix {suffix!r} (known: {known}); "
                    "or set dataset.format"
                )
            self.format = SUFFIXES[suffix]
        if self.hub is not None and self.format not in (None, "nemo_gym"):
            raise ValueError("dataset.format: a hub dataset's format is the Hub's own")
        return self

    @property
    def split_name(self) -> str:
        return self.hub.split if self.hub is not None else self.split
