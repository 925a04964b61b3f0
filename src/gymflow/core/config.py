"""The eval config: pydantic models validated at the edge (YAML files, CLI flags, Prefect forms)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from gymflow.core import bounded_yaml
from gymflow.core.credentials import ApiKeyEnv, ServerUrl, StorageLocation
from gymflow.core.errors import UserError
from gymflow.core.registry import DATA


class ConfigError(UserError, ValueError):
    """A config that cannot be used; the message names the file and every bad field."""


#: Most rollouts per task a run may ask for (the run form's bound too): every stage enumerates
#: tasks x repeats, so `repeats: 1e12` would take the machine's memory before the first call.
MAX_REPEATS = 1000
#: The longest text gymflow stores in one field of a rollout, model call, verdict or task (an
#: answer, a trajectory, a request): the bound of every body its servers and proxy read, 8
#: times the default answer bound. A store holding a longer one was not written by gymflow and
#: is refused on open (`store.stored_values.check_large_text`).
MAX_TEXT_BYTES = 64 << 20
#: Most output tokens a call may ask for: a larger integer cannot be sent (JSON encoders stop at
#: 64 bits) and made every rollout a harness error.
MAX_OUTPUT_TOKENS = 2**31 - 1


class _Strict(BaseModel):
    # hide_input_in_errors: a refused value may be a secret (a key, a URL with credentials), and
    # a ValidationError printed whole (Prefect's parameter check, a traceback) would repeat it.
    # allow_inf_nan: YAML's `.inf` passes `gt=0` (`backoff_s: .inf` slept forever on the first
    # retry, `timeout_s: .inf` never timed out); no setting here means anything by one.
    model_config = ConfigDict(
        extra="forbid", frozen=True, hide_input_in_errors=True, allow_inf_nan=False
    )


class Sampling(_Strict):
    """Sampling settings sent on every model call, fixed for the whole run: data, wherever a
    file setting them came from (`DATA`)."""

    # null: not sent, so the server's default applies and is recorded as not sent. OpenAI's
    # reasoning models refuse a request that names either (every call a client_error).
    temperature: Annotated[float | None, DATA] = Field(
        default=1.0,
        ge=0.0,
        le=2.0,
        description="Sampling temperature, 0 to 2; null: not sent (for models that refuse it).",
    )
    top_p: Annotated[float | None, DATA] = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Nucleus sampling's top_p, above 0 to 1; null: not sent (for models that "
        "refuse it).",
    )
    max_output_tokens: Annotated[int, DATA] = Field(
        default=1024,
        ge=1,
        le=MAX_OUTPUT_TOKENS,
        description="Output tokens per model call, at most.",
    )
    seed: Annotated[int | None, DATA] = Field(
        default=0,
        description="Run seed. Each rollout is sent a seed derived from it, its task and repeat, "
        "so a resumed or sharded run asks for exactly the same samples.",
    )
    reasoning_effort: Annotated[Literal["minimal", "low", "medium", "high"] | None, DATA] = Field(
        default=None,
        description="Sent as reasoning.effort; the model then returns reasoning items.",
    )


#: A share of requests, 0 to 1.
Rate = Annotated[float, Field(ge=0.0, le=1.0)]


class FaultSpec(_Strict):
    """Faults the local policy server injects, as rates per request (seeded, deterministic)."""

    latency_ms: float = Field(
        default=0.0, ge=0.0, description="Milliseconds added before every answer."
    )
    rate_429: Rate = Field(
        default=0.0, description="Share of requests answered 429 (rate limited)."
    )
    rate_500: Rate = Field(
        default=0.0, description="Share of requests answered 500 (server error)."
    )
    rate_malformed: Rate = Field(
        default=0.0, description="Share of answers whose body is not valid JSON."
    )
    rate_truncated: Rate = Field(
        default=0.0,
        description="Share of answers cut at the output-token limit (status incomplete).",
    )
    rate_timeout: Rate = Field(default=0.0, description="Share of requests never answered in time.")
    rate_context_length: Rate = Field(
        default=0.0, description="Share of requests refused as over the context length."
    )
    rate_refused: Rate = Field(default=0.0, description="Share of answers that are a refusal.")
    rate_reset: Rate = Field(
        default=0.0, description="Share of answers whose connection drops mid-answer."
    )


class SimulatedBehaviour(_Strict):
    """How the local simulated policy misbehaves, each on purpose and one at a time: the decision
    benchmark (bench/decide.py) breaks one factor of a run and checks the recommended action.
    The defaults are the plain simulation."""

    skill: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Every task's chance of a right answer; None: drawn per task from skill_seed "
        "(some tasks always right, some never, some sometimes).",
    )
    answer_form: Literal["reference", "prose"] = Field(
        default="reference",
        description="prose: the final answer said in a sentence ('The answer is 42.') instead of "
        "the form the task asks for (an 'Answer:' line, a \\boxed{}), as a model told by its "
        "prompt to answer in another form would.",
    )
    tools: Literal["use", "ignore"] = Field(
        default="use",
        description="ignore: never call a tool, answering in text, as a server whose "
        "function-calling handler drops the offered tools does.",
    )
    ramble: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of the wrong answers that repeat one sentence until the output-token "
        "limit cuts them.",
    )
    needs_instructions: str | None = Field(
        default=None,
        description="Reliable only when a system message holds this text (a skill or system "
        "prompt); without it every task's skill is halved.",
    )


#: The `tool_choice` values both the Responses API and chat completions document as text (the
#: openai SDK's `ToolChoiceOptions` and `ChatCompletionToolChoiceOptionParam`).
ToolChoice = Literal["auto", "required", "none"]


class ModelConfig(_Strict):
    """Where the policy's model lives. `local` starts the seeded local policy server."""

    kind: Literal["local", "responses", "chat_completions", "completions"] = Field(
        default="local",
        description="local: the simulated policy server, started for the run. responses: an "
        "OpenAI-compatible /v1/responses server. chat_completions: a /v1/chat/completions one. "
        "completions: a /v1/completions one, sent the conversation rendered with chat_template.",
    )
    chat_template: Literal["plain", "chatml", "gemma", "alpaca"] | None = Field(
        default=None,
        description="model.kind completions only: how gymflow writes the conversation as one "
        "prompt (plain: the turns' text alone, as a base checkpoint was trained on; chatml, "
        "gemma, alpaca: those formats, with their end-of-turn strings as stop).",
    )
    base_url: ServerUrl | None = Field(
        default=None,
        description="e.g. http://127.0.0.1:8000/v1 (no user:password@: use api_key_env)",
    )
    name: str = Field(default="gymflow-local-policy", description="Model name sent on every call.")
    api_key_env: ApiKeyEnv | None = Field(
        default=None,
        description="Name of the environment variable holding the API key (never the key).",
    )
    seed_in: Literal["body", "metadata", "none"] | None = Field(
        default=None,
        description="Where each rollout's seed is sent: the body's `seed` (chat completions "
        "documents it), `metadata.seed`, or nowhere. Default: none for `responses` (not a "
        "Responses API parameter: strict servers answer 422, others drop it), body otherwise.",
    )
    tool_choice: ToolChoice | None = Field(
        default=None,
        description="Sent as `tool_choice` on every call that offers tools: auto, required or "
        "none. Unset: not sent, so the server's default applies (llama.cpp's function-calling "
        "handler then ignores the tools) and the run records it as not sent.",
    )
    max_response_bytes: int = Field(
        default=8 << 20,
        ge=1024,
        le=MAX_TEXT_BYTES,
        description="Longest answer read; a longer one is recorded as response_too_large.",
    )
    timeout_s: float = Field(default=60.0, gt=0.0, description="Total time allowed for one call.")
    connect_timeout_s: float = Field(default=5.0, gt=0.0, description="Time allowed to connect.")
    read_timeout_s: float | None = Field(
        default=None,
        gt=0.0,
        description="Longest silence while reading an answer; timeout_s if unset.",
    )
    max_retries: int = Field(
        default=4,
        ge=0,
        le=20,
        description="Retries of a call after a 429, 5xx, timeout or bad body.",
    )
    backoff_s: float = Field(
        default=0.5, ge=0.0, description="First retry delay; doubles with jitter."
    )
    requests_per_minute: float | None = Field(
        default=None,
        gt=0.0,
        description="Space calls to at most this many per minute; unset: no limit.",
    )
    skill_seed: int = Field(
        default=0, description="Local policy only: which tasks it can and cannot do."
    )
    faults: FaultSpec = FaultSpec()
    simulate: SimulatedBehaviour = Field(
        default=SimulatedBehaviour(), description="Local policy only: behaviours broken on purpose."
    )

    @model_validator(mode="after")
    def _remote_needs_url(self) -> ModelConfig:
        if self.kind != "local" and not self.base_url:
            raise ValueError(f"model.base_url is required when model.kind is {self.kind!r}")
        if (self.kind == "completions") != (self.chat_template is not None):
            raise ValueError(
                "model.chat_template is required when model.kind is 'completions', and only then"
            )
        return self

    @property
    def seed_placement(self) -> Literal["body", "metadata", "none"]:
        """`seed_in`, or the default for this kind of server."""
        if self.seed_in is not None:
            return self.seed_in
        return "none" if self.kind == "responses" else "body"


class HarnessConfig(_Strict):
    """The agent harness that turns the model into an agent."""

    name: str | None = Field(
        default=None, description="Harness name; the environment's default if unset."
    )
    system_prompt: str | None = Field(
        default=None, description="System message sent first; unset: none."
    )
    max_turns: int = Field(
        default=8, ge=1, description="Model calls per rollout at most (tool_loop)."
    )
    agent: str | None = Field(
        default=None,
        description="harness `command`: the agent recipe (oracle, nothing, tool_loop, ...).",
    )
    command: str | None = Field(
        default=None,
        description="harness `command`: an agent's own command line, run in the task's sandbox "
        "with {instruction_file}, {base_url} and {model} filled in; instead of `agent`.",
    )
    agent_version: str | None = Field(
        default=None,
        description="harness `command`: the agent's package and version; the run records what "
        "the recipe reports when unset.",
    )
    sandbox: str = Field(
        default="bubblewrap", description="harness `command`: bubblewrap, docker, podman"
    )


#: A collection id (`rollouts/collection.py`): its planning time (UTC, so that ids sort by it),
#: then a random part.
COLLECTION_PATTERN = r"^c[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$"


class ShardSpec(_Strict):
    """Which shard of the run this is (`--shard I/N`): tasks split by a stable hash of task_id."""

    index: int = Field(default=0, ge=0)
    count: int = Field(default=1, ge=1)
    #: Which collection of the run the shard belongs to (`rollouts/collection.py`): set by the
    #: run that plans the shards, so a worker stores and seals it with the shard; none for a
    #: shard run by hand (`--shard I/N`, its `--out` names it) or an unsharded run.
    collection: str | None = Field(default=None, pattern=COLLECTION_PATTERN)

    @model_validator(mode="after")
    def _index_in_range(self) -> ShardSpec:
        if self.index >= self.count:
            raise ValueError(f"shard index {self.index} is not below shard count {self.count}")
        return self

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        """Parse the CLI's `I/N` form."""
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError as exc:
            raise ConfigError(f"--shard {text!r}: expected I/N, e.g. 0/4") from exc
        try:
            return cls(index=index, count=count)
        except ValidationError as exc:  # pydantic's own text is a multi-line report
            reasons = "; ".join(item["msg"].removeprefix("Value error, ") for item in exc.errors())
            raise ConfigError(f"--shard {text!r}: {reasons}") from None


#: Config keys that decide where a run is written or how fast it runs, not what its rollouts
#: are: outside its fingerprint, and no factor a comparison names (`analysis/factors.py`).
NOT_FACTORS = (
    "out",
    "shard",
    "concurrency",
    "batch_size",
    "resources_url",
    "resources_key_env",
    "stop_after_transport_failures",
    "model.api_key_env",
)

#: Config keys added after run ids were first derived from the config (`fingerprint`), each with
#: the value that means what runs did before it existed: at that value a key is left out of the
#: hash, so a stored run's id is what it was and it still resumes and aggregates. A new key that
#: decides the rollouts joins this table (tests/test_config_identity.py fails otherwise).
ADDED_KEYS: dict[str, object] = {
    "model.tool_choice": None,
    "model.chat_template": None,
    "harness.agent": None,
    "harness.command": None,
    "harness.agent_version": None,
    "harness.sandbox": "bubblewrap",
}

#: Waves of `concurrency` rollouts in a default batch: few Prefect tasks for a long run. A batch's
#: tail no longer drains the window: the next batch fills the slots it frees (`Collector`).
WAVES_PER_BATCH = 16


class EvalConfig(_Strict):
    """One evaluation: what to run, against which policy, how often, and where results go."""

    benchmark: str | None = Field(
        default=None, description="Benchmark name, e.g. arithmetic-smoke."
    )
    environment: str | None = Field(
        default=None, description="Environment name, when no benchmark."
    )
    limit: int | None = Field(default=None, ge=1, description="Use only the first N tasks.")
    repeats: int | None = Field(
        default=None, ge=1, le=MAX_REPEATS, description="Rollouts per task (benchmark default)."
    )
    model: ModelConfig = ModelConfig()
    harness: HarnessConfig = HarnessConfig()
    sampling: Sampling | None = Field(
        default=None,
        description="Unset: the benchmark's sampling. In a config file or by flags, each key "
        "given changes that setting only; the others keep the benchmark's.",
    )
    verifier_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Verifier parameters to change, e.g. {mode: loose}; the rest keep the "
        "benchmark's and environment's values.",
    )
    concurrency: int = Field(default=64, ge=1, le=4096, description="Rollouts in flight at once.")
    batch_size: int = Field(
        default=2000,
        ge=1,
        description="Rollouts per Prefect task. Unset: the larger of 2000 and "
        f"{WAVES_PER_BATCH} x concurrency; set, at least concurrency.",
    )
    out: StorageLocation = Field(
        default="runs/latest", description="Run directory (store and report)."
    )
    shard: ShardSpec = ShardSpec()
    prompt_template: str | None = Field(
        default=None, description="Jinja template over a task's fields; unset: the benchmark's."
    )
    resources_url: ServerUrl | None = Field(
        default=None,
        description="Use the environment's resources server served at this URL (`gym serve "
        "environment NAME --port P`) instead of an in-process one.",
    )
    resources_key_env: ApiKeyEnv | None = Field(
        default=None,
        description="Name of the environment variable holding the served resources server's "
        "access key (never the key): the one `gym serve environment` was given with --key-env, "
        "or the contents of the key file it printed.",
    )
    stop_after_transport_failures: int = Field(
        default=20,
        ge=1,
        description="Stop the run early (resumable) when this many rollouts in a row could not "
        "reach the model server (or a served resources server), after each call's own retries.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> EvalConfig:
        if not self.benchmark and not self.environment:
            raise ValueError("set either benchmark or environment")
        return self

    @model_validator(mode="after")
    def _batch_holds_concurrency(self) -> EvalConfig:
        """A batch's rollouts (and, in its tail, the next batch's) are the most that can be in
        flight at once: a batch below the concurrency would cap it silently. The default grows
        to `WAVES_PER_BATCH` waves; a smaller size set by hand is kept, unless it is below the
        concurrency, which is refused."""
        if "batch_size" not in self.model_fields_set:
            batch = max(self.batch_size, WAVES_PER_BATCH * self.concurrency)
            object.__setattr__(self, "batch_size", batch)
        elif self.batch_size < self.concurrency:
            raise ValueError(
                f"batch_size {self.batch_size} is below concurrency {self.concurrency}: at most "
                "batch_size rollouts are in flight at once; raise batch_size or lower concurrency"
            )
        return self

    def fingerprint(self) -> str:
        """Hash of everything that decides the rollouts (not where they go or which shard)."""
        identity = self.model_dump(mode="json")
        for key in NOT_FACTORS:
            node, leaf = _holder(identity, key)
            node.pop(leaf, None)
        for key, before in ADDED_KEYS.items():
            node, leaf = _holder(identity, key)
            if node.get(leaf, before) == before:
                node.pop(leaf, None)
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _holder(identity: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    """The mapping inside `identity` that holds dotted `key`, and the key's last part."""
    *parents, leaf = key.split(".")
    node = identity
    for part in parents:
        node = node[part]
    return node, leaf


def missing_api_key(model: ModelConfig) -> str | None:
    """Why a run of `model` would send no key (`api_key_env` names a variable not set here), or
    None: every request would then fail, or succeed as someone else."""
    key = model.api_key_env
    if key and not os.environ.get(key):
        return (
            f"model.api_key_env names {key}, which is not set here: export {key}=... (the key "
            "is read from it at run time and never stored)"
        )
    return None


def format_validation_error(
    error: ValidationError, source: str, names: dict[str, str] | None = None
) -> str:
    """One line per problem, each naming its field as the user gave it: `names` maps a dotted
    field to what set it (a CLI flag: `sampling.temperature` -> `--temperature`)."""
    lines = [f"{source}: invalid config ({error.error_count()} problem(s))"]
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  - {(names or {}).get(field, field)}: {item['msg']}")
    return "\n".join(lines)


def _keys(data: Any) -> set[str]:
    """The keys of a mapping read from a file; none for anything else."""
    return {str(key) for key in cast(dict[Any, Any], data)} if isinstance(data, dict) else set()


def refuse_removed(data: Any, removed: dict[str, str]) -> Any:
    """`data` unchanged, unless it still sets a field gymflow no longer reads: a ValueError then
    names the field and what replaces it (a plain "extra inputs" error would not say)."""
    for name, replacement in removed.items():
        if name in _keys(data):
            raise ValueError(f"{name}: removed; {replacement}")
    return data


def parse_config(data: Any, source: str, names: dict[str, str] | None = None) -> EvalConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of config keys, got {type(data).__name__}")
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, names)) from None


def load_config_file(path: Path) -> dict[str, Any]:
    try:
        text = bounded_yaml.read_text(path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    except bounded_yaml.YamlFileError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    try:
        data = bounded_yaml.safe_load(text)
    except bounded_yaml.YamlBombError as exc:
        raise ConfigError(f"{path}: refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} malformed YAML: {exc}") from None
    return data if data is not None else {}


def merge_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Overlay CLI flags (dotted keys allowed) on a config mapping."""
    merged = json.loads(json.dumps(base))
    for key, value in overrides.items():
        if value is None:
            continue
        node = merged
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return merged
