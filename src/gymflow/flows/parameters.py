"""Flow parameters beyond the eval config, as pydantic models: the Prefect UI renders them as a
validated form with these descriptions, defaults and bounds."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gymflow.config import EvalConfig, ShardSpec

#: The deployment that runs one shard on a work pool (flow name / deployment name).
SHARD_FLOW = "eval-shard"


class ScaleOptions(BaseModel):
    """How a run is split and where its pieces run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shards: int = Field(
        1,
        ge=1,
        le=1024,
        description="Split the run into this many shards (tasks assigned by a stable hash of "
        "task_id). Each shard writes its own store; the run store is their merge.",
    )
    work_pool: str | None = Field(
        None,
        description="Run each shard as a run of the `eval-shard` deployment on this Prefect work "
        "pool (one machine per worker). Unset: shards run as concurrent subflows here.",
    )
    shard_root: str | None = Field(
        None,
        description="Folder holding shard stores (RUN_DIR/shards if unset). With a work pool it "
        "must be a path every worker and this flow can reach, e.g. a shared filesystem mount.",
    )
    shard_retries: int = Field(
        2, ge=0, le=20, description="Times a failed shard is re-run before the run fails."
    )
    shard_retry_delay_s: float = Field(
        5.0, ge=0.0, le=3600.0, description="Wait before re-running a failed shard."
    )
    shard_timeout_s: float | None = Field(
        None,
        gt=0.0,
        description="Work pool only: give up waiting for one shard's flow run after this long.",
    )

    @property
    def sharded(self) -> bool:
        return self.shards > 1 or self.work_pool is not None


#: The default: one store, collected in one flow run.
UNSHARDED = ScaleOptions()


def shard_dir(config: EvalConfig, scale: ScaleOptions, run_id: str, index: int) -> Path:
    """Where shard `index` of the run keeps its store. Namespaced by run id, so several runs can
    share one shard root without a shard store ever holding two runs."""
    root = Path(scale.shard_root) if scale.shard_root else Path(config.out) / "shards"
    return root / run_id / f"shard-{index}-of-{scale.shards}"


def shard_config(config: EvalConfig, scale: ScaleOptions, run_id: str, index: int) -> EvalConfig:
    """The config one shard runs: the same run (same fingerprint), its shard, its own store."""
    return config.model_copy(
        update={
            "shard": ShardSpec(index=index, count=scale.shards),
            "out": str(shard_dir(config, scale, run_id, index)),
        }
    )
