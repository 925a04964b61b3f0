"""What makes an evaluation flow run findable in the Prefect UI: a name from its benchmark, model
and date, and tags to filter by benchmark, environment, model and harness."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect.client.orchestration import get_client
from prefect.runtime import flow_run

from gymflow.rollouts.plan import RunPlan


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


def run_tags(plan: RunPlan) -> list[str]:
    """benchmark:, environment:, model: and harness: tags (the environment's harness if unset)."""
    benchmark = [f"benchmark:{plan.benchmark.name}"] if plan.benchmark else []
    return [
        f"model:{plan.config.model.name}",
        *benchmark,
        f"environment:{plan.env.name}",
        f"harness:{plan.harness}",
    ]


def tag_run(plan: RunPlan) -> None:
    """Give this flow run the run's tags it lacks, beside those its deployment gave it. A run
    started by `gym eval run` was created with them (`prefect.tags` around the call), and one
    from the UI or a schedule gets them in one update: the flow run's tags are read from its
    context, not from the API."""
    if flow_run.id is None:
        return
    current = list(flow_run.tags)
    missing = [tag for tag in run_tags(plan) if tag not in current]
    if missing:
        with get_client(sync_client=True) as client:
            client.update_flow_run(flow_run.id, tags=[*current, *missing])
