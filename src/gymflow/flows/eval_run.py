"""The evaluation loop as a Prefect flow: collect, check health, profile, report."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_link_artifact, create_table_artifact

from gymflow import progress
from gymflow.config import EvalConfig
from gymflow.models.endpoint import model_endpoint
from gymflow.tasks.analysis import check_health, profile_run, render_report
from gymflow.tasks.rollouts import collect_batch, prepare_run


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@flow(name="eval-run", log_prints=True)
def evaluation_loop(config: EvalConfig, resume: bool = False) -> dict[str, Any]:
    """Collect every missing rollout of the config's run, then health, profile and report."""
    plan = prepare_run(config, resume)
    keys = plan.keys()
    run_dir = str(plan.run_dir)
    batches = _chunks(keys, config.batch_size)
    with model_endpoint(plan) as base_url:
        progress.started(len(keys))
        collected = [collect_batch(plan, batch, base_url) for batch in batches]
    health_result = check_health(run_dir)
    profile_result = profile_run(run_dir)
    report_path = render_report(run_dir)
    _publish(profile_result, health_result, report_path)
    return {
        "run_dir": run_dir,
        "report": report_path,
        "profile": profile_result,
        "health": health_result,
        "collected": collected,
    }


def _publish(profile: dict[str, Any], health: dict[str, Any], report_path: str) -> None:
    create_link_artifact(
        key="gymflow-report",
        link=f"file://{report_path}",
        link_text="gymflow HTML report",
        description="Decision report",
    )
    rows = [
        {"metric": "pass@1", "value": profile["pass@1"]},
        {"metric": "ci95_low", "value": (profile["ci95"] or [None])[0]},
        {"metric": "ci95_high", "value": (profile["ci95"] or [None, None])[1]},
        *({"metric": f"pass@{k}", "value": v} for k, v in profile["pass@k"].items()),
        *({"metric": f"coverage_{k}", "value": v} for k, v in profile["coverage"].items()),
        {"metric": "health", "value": health["verdict"]},
    ]
    create_table_artifact(key="gymflow-headline", table=rows, description="Headline metrics")
