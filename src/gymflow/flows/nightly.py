"""The `nightly` flow: the evaluation loop, then the regression gate (a CUSUM of paired tests
against a pinned baseline, `gymflow.history.gate`). A regression fails the flow run, is stated
in the run's report and artifacts, and emits a `gymflow.run.regressed` event an automation can
turn into a notification."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event
from prefect.states import Failed, State
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict, Field

from gymflow.core.errors import GateFailed
from gymflow.flows.eval_run import MAX_CONCURRENT_SHARDS, RunOutcome, run_evaluation
from gymflow.flows.fan_out import publish_beside_shards
from gymflow.flows.labels import run_name
from gymflow.flows.lean import flow
from gymflow.flows.parameters import UNSHARDED, FlowConfig, ScaleOptions
from gymflow.history.gate import GateVerdict, gate, save_verdict
from gymflow.store.remote import is_url

REGRESSED_EVENT = "gymflow.run.regressed"


class GateOptions(BaseModel):
    """What a nightly run is compared with, and how large a drop fails it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Plain strings, empty for "none": the Prefect form shows a text box, not a null type.
    baseline: str = Field(
        default="",
        description="The baseline run folder every night is compared with, when the history "
        "folder has no pinned one (`gym runs pin`; empty: the earliest run of the benchmark "
        "version in the history folder).",
    )
    margin: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Drop in pass@1, as a fraction (0.02 = 2 points), that a drop the CUSUM "
        "alarms on must exceed to fail the gate.",
    )
    history: str = Field(
        default="",
        description="Folder holding the earlier runs (empty: the folder holding this run).",
    )


NO_GATE_OPTIONS = GateOptions()


class RegressionFound(GateFailed):
    """The gate found a significant drop beyond the margin (the run itself is stored)."""


@task(name="regression-gate", cache_policy=NO_CACHE)
def gate_run(run_dir: str, options: GateOptions) -> GateVerdict:
    verdict = gate(
        Path(run_dir),
        root=Path(options.history) if options.history else None,
        baseline=Path(options.baseline) if options.baseline else None,
        margin=options.margin,
    )
    save_verdict(verdict)
    return verdict


@dataclass(frozen=True, slots=True)
class NightlyOutcome:
    """Tonight's run and its regression gate's verdict."""

    run: RunOutcome
    gate: GateVerdict


@flow(
    name="nightly",
    flow_run_name=run_name,
    log_prints=True,
    task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENT_SHARDS),
)
def nightly(
    config: FlowConfig, scale: ScaleOptions = UNSHARDED, gate: GateOptions = NO_GATE_OPTIONS
) -> NightlyOutcome:
    """Run the evaluation loop, then gate the run on regressions. The loop runs in this flow
    run, not in a subflow: its progress, summary, report link and log are on this run's page.
    A regression (or an unhealthy run: the gate counts it) ends the run Failed.

    Args:
        config: What to run; `{date}` in `out` gives each night its own run folder.
        scale: How the run is sharded.
        gate: What the run is compared with and how large a drop fails it.
    """
    # A retry of this flow run (the UI's Retry) continues tonight's run instead of refusing it.
    result = run_evaluation(config, resume=False, scale=scale, retry_failed=True)
    if isinstance(result, State):  # cancelled
        return result
    verdict = gate_run(result.run_dir, gate)
    # The report was written before the gate: again, so that it states the verdict.
    from gymflow.reports.render import write_report

    write_report(result.run_dir, analysis=result.analysis)
    if scale.shard_root and is_url(scale.shard_root):  # the published report states it too
        publish_beside_shards(config, scale.shard_root, result.collection)
    baseline = f"\n\n{verdict.baseline.line()}" if verdict.baseline is not None else ""
    get_run_logger().info(verdict.summary() + baseline)
    report = f"\n\nReport: {result.report_url}" if result.report_url else ""
    create_markdown_artifact(
        key="gymflow-regression-gate",
        markdown=f"# Regression gate\n\n{verdict.summary()}{baseline}\n\nTest: {verdict.test}."
        f"{report}",
        description="Nightly regression gate",
    )
    if not verdict.passed:
        emit_event(
            event=REGRESSED_EVENT,
            resource={
                "prefect.resource.id": f"gymflow.run.{Path(result.run_dir).name}",
                "prefect.resource.name": config.benchmark or config.environment or "run",
            },
            payload=verdict.as_dict(),
        )
        message = verdict.summary()
        return Failed(name="Regressed", message=message, data=RegressionFound(message))
    return NightlyOutcome(result, verdict)
