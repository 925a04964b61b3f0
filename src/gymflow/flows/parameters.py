"""Flow parameters as pydantic models: the Prefect UI renders them as a validated form with these
descriptions, defaults and bounds.

The eval-run form (`RunForm`) is the eval config shaped for a person filling it in: the benchmark,
required, is a choice taken from the registry when the deployment is made; every field says its
unit; sampling fields change only what is set and keep the benchmark's other defaults; shards are
set in one place (`scale`); the local policy's test-only settings sit apart, at the end. The flow
itself receives an `EvalConfig` (`FlowConfig` converts), so the CLI and tests pass one directly.

Every rule a JSON schema can state is in the schema (bounds, choices), so the UI refuses the value
before a run exists; the others (a name unknown or not runnable where the flow runs) fail as the
flow's parameters are validated, naming the field, before any task or model call."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.json_schema import SkipJsonSchema

from gymflow.core.config import (
    COLLECTION_PATTERN,
    MAX_REPEATS,
    ApiKeyEnv,
    EvalConfig,
    FaultSpec,
    Sampling,
    ServerUrl,
    ShardSpec,
    StorageLocation,
    ToolChoice,
)
from gymflow.environments.registry import (
    RegistryError,
    UnknownName,
    benchmark_files,
    environment_sources,
    load_benchmark,
)
from gymflow.environments.requirements import MissingPackage, check_installed, install_hint
from gymflow.store.remote import is_url

#: The deployment that runs one shard on a work pool (flow name / deployment name).
SHARD_FLOW = "eval-shard"

#: How long a run waits for one shard's flow run on a work pool by default: a shard whose host
#: died stays Running in Prefect (until an automation marks it crashed), and a run that waited
#: forever would never retry it elsewhere. Generous: a slow but live shard must not be cut off.
SHARD_TIMEOUT_S = 4 * 3600.0

#: A shard on a shard root URL checkpoints when either is reached: a host that dies loses at
#: most that much work, plus the rollouts it had in flight.
CHECKPOINT_S = 5.0
CHECKPOINT_ROLLOUTS = 200


def _no_null_defaults(schema: dict[str, Any]) -> None:
    """An unset field shows as empty in the form, not as a default of null."""
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]


class _Form(BaseModel):
    # A refused value is never repeated in the error: it may be the key given in the wrong field.
    model_config = ConfigDict(
        extra="forbid", frozen=True, hide_input_in_errors=True, json_schema_extra=_no_null_defaults
    )

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Unset (None) fields are left out, so a default shown in the form, and sent back by
        it, never holds a null the schema does not allow."""
        return {key: value for key, value in handler(self).items() if value is not None}


# Bounds on the value itself, not on `X | None`, so the schema states them as JSON Schema does
# (minimum, exclusiveMinimum, maximum) and the UI checks them.
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
Positive = Annotated[float, Field(gt=0.0)]
Count = Annotated[int, Field(ge=1)]
Repeats = Annotated[int, Field(ge=1, le=MAX_REPEATS)]


def _runnable_benchmark(name: str) -> str:
    """A benchmark name, checked against the registry as it is at run time (the form's choices
    were taken when `prefect deploy` built it), and refused before anything runs when a package
    its environment's data comes from is not installed where the flow runs (bfcl-eval)."""
    names = benchmark_files()
    if name not in names:
        raise ValueError(str(UnknownName("benchmark", name, names)))  # a form error: ValueError
    try:
        environment = load_benchmark(name).environment
        source = environment_sources().get(environment)
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    if source is not None:
        try:
            check_installed(environment, source.manifest.requires)
        except MissingPackage as exc:
            raise ValueError(f"benchmark {name!r} cannot run on this worker: {exc}") from None
    return name


def _benchmark_choices(schema: dict[str, Any]) -> None:
    """The benchmarks registered when the schema is built (`prefect deploy`), as the field's
    choices; those that need a package not installed there are named in its description. Built
    then, not when this module is imported: the CLI imports it, and loads no benchmark it does
    not run."""
    try:
        names = sorted(benchmark_files())
        sources = environment_sources()
        requires = {name: sources.get(load_benchmark(name).environment) for name in names}
    except RegistryError:  # a broken manifest or benchmark: the command that reads it says so
        return
    schema["enum"] = names
    for name, source in requires.items():
        hint = install_hint(source.manifest.requires) if source else None
        if hint:
            schema["description"] += (
                f" Unavailable until its package is installed: {name} ({hint})."
            )


BENCHMARK_HELP = (
    "The benchmark: a versioned protocol over an environment (split, prompt, repeats, "
    "sampling). To run an environment without one, use `gym eval run --environment NAME`."
)
BenchmarkChoice = Annotated[str, AfterValidator(_runnable_benchmark)]


class SamplingForm(_Form):
    """Sampling settings to change; an unset field keeps the benchmark's value."""

    temperature: Temperature | SkipJsonSchema[None] = Field(
        default=None, description="0 to 2. Unset: the benchmark's value."
    )
    top_p: Fraction | SkipJsonSchema[None] = Field(
        default=None,
        description="Nucleus sampling mass, above 0 and at most 1. Unset: the benchmark's value.",
    )
    max_output_tokens: Count | SkipJsonSchema[None] = Field(
        default=None, description="Tokens per model answer, at most. Unset: the benchmark's value."
    )
    seed: int | SkipJsonSchema[None] = Field(
        default=None,
        description="Run seed; each rollout is sent a seed derived from it, its task and repeat. "
        "Unset: the benchmark's value.",
    )
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | SkipJsonSchema[None] = Field(
        default=None,
        description="Sent as reasoning.effort (reasoning models only). Unset: the benchmark's "
        "value.",
    )

    def over(self, base: Sampling) -> Sampling:
        """`base` with only the fields set here changed."""
        return Sampling.model_validate({**base.model_dump(), **self.model_dump(exclude_none=True)})


class ModelForm(_Form):
    """Where the policy's model lives."""

    kind: Literal["local", "responses", "chat_completions"] = Field(
        default="local",
        description="local: gymflow's simulated policy server (no real model). responses: an "
        "OpenAI-compatible /v1/responses server. chat_completions: a server with only "
        "/v1/chat/completions (vLLM, SGLang, Ollama).",
    )
    base_url: ServerUrl | SkipJsonSchema[None] = Field(
        default=None,
        description="The model server's base URL, e.g. http://127.0.0.1:8000/v1. Required "
        "unless kind is local.",
    )
    name: str = Field(default="gymflow-local-policy", description="Model name sent on every call.")
    api_key_env: ApiKeyEnv | SkipJsonSchema[None] = Field(
        default=None,
        description="Name of the environment variable (on the worker) holding the API key. "
        "Never the key itself.",
    )
    tool_choice: ToolChoice | SkipJsonSchema[None] = Field(
        default=None,
        description="Sent as tool_choice on every call that offers tools (auto, required, "
        "none). Unset: not sent; the server's default applies.",
    )
    timeout_s: float = Field(
        default=60.0, gt=0.0, description="Seconds allowed for one call in total."
    )
    connect_timeout_s: float = Field(default=5.0, gt=0.0, description="Seconds allowed to connect.")
    read_timeout_s: Positive | SkipJsonSchema[None] = Field(
        default=None,
        description="Longest silence, in seconds, while reading an answer. Unset: timeout_s.",
    )
    max_retries: int = Field(
        default=4,
        ge=0,
        le=20,
        description="Retries of a call after a 429, 5xx, timeout or bad body.",
    )
    backoff_s: float = Field(
        default=0.5, ge=0.0, description="Seconds before the first retry; doubles, with jitter."
    )
    requests_per_minute: Positive | SkipJsonSchema[None] = Field(
        default=None, description="Space calls to at most this many per minute. Unset: no limit."
    )


class HarnessForm(_Form):
    """The agent loop around the model."""

    name: str | SkipJsonSchema[None] = Field(
        default=None,
        description="single_turn or tool_loop, or module:function of your own. Unset: the "
        "environment's harness.",
    )
    system_prompt: str | SkipJsonSchema[None] = Field(
        default=None, description="System message sent first. Unset: none."
    )
    max_turns: int = Field(
        default=8, ge=1, le=1000, description="Model calls per rollout at most (tool_loop)."
    )


class TestOnly(_Form):
    """For gymflow's own tests: how the simulated local policy behaves. Leave as is."""

    skill_seed: int = Field(
        default=0, description="Which tasks the local policy can and cannot do."
    )
    faults: FaultSpec = Field(
        default=FaultSpec(),
        description="Faults the local policy server injects, as rates per request.",
    )


class RunForm(_Form):
    """What to run, against which policy, how often, and where results go."""

    # Required, so the form marks it: the one field every run needs.
    benchmark: BenchmarkChoice = Field(
        description=BENCHMARK_HELP, json_schema_extra=_benchmark_choices
    )
    model: ModelForm = Field(default=ModelForm(), description="The policy's model server.")
    sampling: SamplingForm = Field(
        default=SamplingForm(),
        description="Only the fields set here change; the others keep the benchmark's values.",
    )
    repeats: Repeats | SkipJsonSchema[None] = Field(
        default=None, description="Rollouts per task. Unset: the benchmark's count."
    )
    limit: Count | SkipJsonSchema[None] = Field(
        default=None, description="Use only the first N tasks. Unset: all of them."
    )
    harness: HarnessForm = Field(default=HarnessForm(), description="The agent harness.")
    out: StorageLocation = Field(
        default="runs/ui/{date}/{flow_run_id}",
        description="Run folder (store and report.html), relative to the worker's working "
        "directory. `{date}` becomes the run's scheduled date in UTC (YYYY-MM-DD), "
        "`{flow_run_id}` this flow run's id: the default gives every run a folder of its own, "
        "and a retry finds the same one. A fixed folder holding a run is continued only with "
        "resume.",
    )
    concurrency: int = Field(default=64, ge=1, le=4096, description="Rollouts in flight at once.")
    batch_size: int = Field(
        default=2000,
        ge=1,
        le=100_000,
        description="Rollouts per Prefect task (one task per batch).",
    )
    verifier_params: dict[str, Any] = Field(
        default_factory=dict,
        description='Verifier parameters to change, e.g. {"mode": "loose"}. Empty: the '
        "benchmark's.",
    )
    prompt_template: str | SkipJsonSchema[None] = Field(
        default=None, description="Jinja template over a task's inputs. Unset: the benchmark's."
    )
    resources_url: ServerUrl | SkipJsonSchema[None] = Field(
        default=None,
        description="A resources server started with `gym serve environment NAME`. Unset: one "
        "in-process.",
    )
    resources_key_env: ApiKeyEnv | SkipJsonSchema[None] = Field(
        default=None,
        description="Name of the environment variable (on the worker) holding that server's "
        "access key; never the key.",
    )
    test_only: TestOnly = Field(
        default=TestOnly(),
        description="For gymflow's own tests (the simulated policy). Leave as is.",
    )

    def eval_config(self) -> EvalConfig:
        """The eval config this form describes; sampling overrides land on the benchmark's."""
        sampling = None
        if self.sampling.model_dump(exclude_none=True):
            try:
                base = load_benchmark(self.benchmark).sampling
            except RegistryError as exc:
                raise ValueError(f"benchmark: {exc}") from None
            sampling = self.sampling.over(base)
        model = self.model.model_dump() | self.test_only.model_dump()
        return EvalConfig.model_validate(
            {
                **self.model_dump(exclude={"model", "sampling", "test_only", "harness"}),
                "model": model,
                "sampling": sampling,
                "harness": self.harness.model_dump(),
            }
        )


def _flow_config(value: Any) -> EvalConfig:
    """An EvalConfig as it is (the CLI, tests), or a form filled in the UI. A mapping with a
    `shard` is an EvalConfig's own dump (a run started with `run_deployment` from code)."""
    if isinstance(value, EvalConfig):
        return value
    if isinstance(value, dict) and "shard" in value:
        return EvalConfig.model_validate(value)
    return RunForm.model_validate(value).eval_config()


#: The eval-run flow's `config` parameter: the form in the UI, an EvalConfig in the flow body.
FlowConfig = Annotated[EvalConfig, PlainValidator(_flow_config, json_schema_input_type=RunForm)]


class ScaleOptions(_Form):
    """How a run is split and where its pieces run: the one place to say how to shard."""

    shards: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Split the run into this many shards (tasks assigned by a stable hash of "
        "task_id). Each shard writes its own store; the run store is their merge.",
    )
    work_pool: str | SkipJsonSchema[None] = Field(
        default=None,
        description="Run each shard as a run of the `eval-shard` deployment on this Prefect work "
        "pool (one machine per worker). Unset: shards run as concurrent subflows here.",
    )
    # A URL's `key:secret@` would be stored in plain text as the run's parameter: refused as
    # every URL of the config is, by the schema before a flow run exists (a folder passes).
    shard_root: StorageLocation | SkipJsonSchema[None] = Field(
        default=None,
        description="Where shard results go (RUN_DIR/shards if unset): a folder, or an object "
        "storage URL (s3://bucket/prefix, gs://…, file://…) that every worker reaches, with "
        "credentials from the storage's own variables (AWS_*, AWS_ENDPOINT_URL). With a URL a "
        "shard works on a local store, checkpoints it there and commits its result once; with "
        "a work pool on several machines, use a URL (or a folder every worker mounts).",
    )
    shard_retries: int = Field(
        default=2, ge=0, le=20, description="Times a failed shard is re-run before the run fails."
    )
    shard_retry_delay_s: float = Field(
        default=5.0,
        ge=0.0,
        le=3600.0,
        description="Seconds to wait before re-running a failed shard.",
    )
    shard_timeout_s: Positive = Field(
        default=SHARD_TIMEOUT_S,
        description="Work pool only: seconds to wait for one shard's flow run before it is "
        "cancelled and retried (a worker whose host died never reports back).",
    )
    checkpoint_s: Positive = Field(
        default=CHECKPOINT_S,
        description="Shard root URL only: seconds between a shard's checkpoints (a host that "
        "dies loses at most this much of its work).",
    )
    checkpoint_rollouts: Count = Field(
        default=CHECKPOINT_ROLLOUTS,
        description="Shard root URL only: a checkpoint once this many rollouts are new.",
    )

    # Set by the flow as it plans the shards (`flows/eval_run.py`), never in the form: a
    # Prefect retry of the flow run keeps it with the other parameters, and so continues it.
    collection: SkipJsonSchema[str | None] = Field(
        default=None,
        pattern=COLLECTION_PATTERN,
        description="The collection of the run these shards belong to (a continuation's).",
    )

    @property
    def sharded(self) -> bool:
        return self.shards > 1 or self.work_pool is not None


#: The default: one store, collected in one flow run.
UNSHARDED = ScaleOptions()


def shard_dir(config: EvalConfig, scale: ScaleOptions, run_id: str, index: int) -> str:
    """Where shard `index` of the run keeps its store (a folder) or publishes it (a URL).
    Namespaced by run id, so several runs can share one shard root without a shard store ever
    holding two runs, then by collection, so a later collection of the same config (tomorrow's
    nightly) never restores an earlier one's shards. With no collection, an earlier gymflow's
    layout (`RUN_ID/shard-I-of-N`), where a shard run by hand finds it."""
    collection = f"{scale.collection}/" if scale.collection else ""
    return f"{run_root(config, scale, run_id)}/{collection}shard-{index}-of-{scale.shards}"


def run_root(config: EvalConfig, scale: ScaleOptions, run_id: str) -> str:
    """The folder (or URL) of a run's collections under its shard root: `ROOT/RUN_ID`."""
    if scale.shard_root and is_url(scale.shard_root):
        return f"{scale.shard_root.rstrip('/')}/{run_id}"
    root = Path(scale.shard_root) if scale.shard_root else Path(config.out) / "shards"
    return str(root / run_id)


def shard_config(config: EvalConfig, scale: ScaleOptions, run_id: str, index: int) -> EvalConfig:
    """The config one shard runs: the same run (same fingerprint), its shard, its own store."""
    return config.model_copy(
        update={
            "shard": ShardSpec(index=index, count=scale.shards, collection=scale.collection),
            "out": shard_dir(config, scale, run_id, index),
        }
    )
