"""What makes an evaluation flow run findable in the Prefect UI: a name from its benchmark, model
and date, and tags to filter by benchmark, environment, model and harness."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect.client.orchestration import get_client
from prefect.runtime import flow_run

from gymflow.config import EvalConfig
from gymflow.environments.registry import RegistryError, load_benchmark, load_environment


def _field(config: Any, *path: str) -> Any:
    """A field of the config parameter, validated (EvalConfig) or still as submitted (a dict)."""
    for name in path:
        config = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    return config


def run_name() -> str:
    """`flow_run_name` of the eval-run flow, e.g. arithmetic-smoke_my-model_2026-11-30T0200Z."""
    config = flow_run.parameters.get("config")
    target = _field(config, "benchmark") or _field(config, "environment") or "eval"
    model = _field(config, "model", "name") or "gymflow-local-policy"
    when = flow_run.scheduled_start_time or datetime.now(UTC)
    return f"{target}_{model}_{when.astimezone(UTC):%Y-%m-%dT%H%MZ}"


def run_tags(config: EvalConfig) -> list[str]:
    """benchmark:, environment:, model: and harness: tags (the environment's harness if unset)."""
    tags = [f"model:{config.model.name}"]
    environment = config.environment
    try:
        if config.benchmark:
            tags.append(f"benchmark:{config.benchmark}")
            environment = environment or load_benchmark(config.benchmark).environment
        harness = config.harness.name or load_environment(environment).manifest.harness
    except RegistryError:
        return tags  # the flow's own checks name the problem
    return [*tags, f"environment:{environment}", f"harness:{harness}"]


def tag_run(config: EvalConfig) -> None:
    """Add the run's tags to this flow run, beside those its deployment gave it."""
    if flow_run.id is None:
        return
    with get_client(sync_client=True) as client:
        current = client.read_flow_run(flow_run.id).tags
        wanted = [*current, *(t for t in run_tags(config) if t not in current)]
        if wanted != current:
            client.update_flow_run(flow_run.id, tags=wanted)
