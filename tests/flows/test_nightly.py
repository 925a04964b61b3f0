"""The nightly flow through Prefect: a run that fell below its pinned baseline fails the gate,
says so in its report and artifacts, and emits the event an automation listens for."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
)

from gymflow.core.config import EvalConfig
from gymflow.flows.eval_run import evaluation_loop
from gymflow.flows.nightly import REGRESSED_EVENT, GateOptions, RegressionFound, nightly

pytestmark = pytest.mark.prefect


def _config(out: Path, limit: int = 40, repeats: int = 2, **changes) -> EvalConfig:
    return EvalConfig(
        benchmark="arithmetic-smoke", limit=limit, repeats=repeats, out=str(out), **changes
    )


async def _events(name: str, resource_id: str, timeout_s: float = 60) -> list[dict]:
    """The server's events of this name about this resource; events reach the server through a
    background worker, so they are polled for."""
    deadline = time.monotonic() + timeout_s
    async with get_client() as client:
        while True:
            answer = await client._client.post(
                "/events/filter", json={"filter": {"event": {"name": [name]}}, "limit": 50}
            )
            answer.raise_for_status()
            found = [
                e
                for e in answer.json()["events"]
                if e["resource"]["prefect.resource.id"] == resource_id
            ]
            if found or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.5)


def _artifact_keys(run_id) -> set[str]:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    return {a.key for a in found if a.key}


def _subflow_runs(run_id) -> list:
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id])
            )
        )


def test_a_run_below_its_baseline_fails_the_gate_and_says_so(prefect_api, tmp_path):
    # The pinned baseline accepted answers off by one (the simulated policy's wrong answers):
    # tonight's run, judged strictly, is a real and large drop against it: about 20 points,
    # beyond the gate's single-night limit (3.5 standard errors) at the benchmark's 50 tasks x 4.
    baseline = tmp_path / "baseline"
    evaluation_loop(_config(baseline, limit=50, repeats=4, verifier_params={"abs_tol": 1.5}))
    tonight = tmp_path / "nightly" / "2026-01-02"
    options = GateOptions(baseline=str(baseline), margin=0.05)
    state = nightly(_config(tonight, limit=50, repeats=4), gate=options, return_state=True)
    assert state.is_failed() and state.name == "Regressed"
    with pytest.raises(RegressionFound, match="regression gate FAILED: vs baseline"):
        state.result()
    # the nightly's own run carries the results: no subflow of the same name holds them
    run_id = state.state_details.flow_run_id
    assert {"gymflow-summary", "gymflow-report", "gymflow-progress"} <= _artifact_keys(run_id)
    assert "gymflow-regression-gate" in _artifact_keys(run_id)
    assert not _subflow_runs(run_id)
    verdict = json.loads((tonight / "gate.json").read_text())
    assert verdict["passed"] is False
    assert verdict["checks"][0]["against"] == "baseline"
    assert verdict["checks"][0]["difference"] < -0.05
    report = (tonight / "report.html").read_text()
    assert 'id="regression-gate"' in report and "Regression gate FAILED" in report
    # the health card names both gates: the run's records pass, the regression gate fails
    assert 'data-field="regression.gate" data-value="fail"' in report
    assert 'health gate <strong class="healthy" data-field="health.gate"' in report
    events = asyncio.run(_events(REGRESSED_EVENT, "gymflow.run.2026-01-02"))
    assert events and events[0]["payload"]["passed"] is False


def test_a_run_like_the_one_before_passes(prefect_api, tmp_path):
    first = tmp_path / "nightly" / "2026-01-01"
    nightly(_config(first))
    result = nightly(_config(tmp_path / "nightly" / "2026-01-02", sampling={"seed": 1}))
    assert result.gate.passed is True
    # the first night is the pinned baseline by default
    assert [c.against for c in result.gate.checks] == ["baseline"]
    assert result.gate.checks[0].run_dir == str(first.resolve())


def test_a_late_night_is_dated_by_its_schedule_not_its_start(prefect_api, tmp_path):
    """A nightly run started days after its scheduled time (a worker was down) writes the
    scheduled night's folder: `{date}` is the flow run's expected start, not its subflow's."""
    from datetime import UTC, datetime, timedelta

    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Scheduled

    night = datetime.now(UTC) - timedelta(days=3)
    parameters = {"config": _config(tmp_path / "nightly" / "{date}", limit=10, repeats=1)}
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(
            nightly, parameters=parameters, state=Scheduled(scheduled_time=night)
        )
    result = run_flow(nightly, flow_run=flow_run, parameters=parameters)
    assert Path(result.run.run_dir) == tmp_path / "nightly" / f"{night:%Y-%m-%d}"
    assert (tmp_path / "nightly" / f"{night:%Y-%m-%d}" / "report.html").exists()
