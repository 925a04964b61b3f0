"""What an eval-run flow run shows while and after it runs, through Prefect: progress that moves
within one batch (an unsharded run of up to 2,000 rollouts is one), a state that agrees with
the health gate, the default run folder that never collides, and errors that name the form's
fields rather than the CLI's flags."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.sorting import LogSort

from gymflow.core.config import EvalConfig
from gymflow.flows.artifacts import PROGRESS_KEY
from gymflow.flows.eval_run import UnhealthyRun, evaluation_loop
from gymflow.flows.parameters import RunForm

pytestmark = pytest.mark.prefect


def _messages(run_id, wanted: str, timeout_s: float = 30) -> list[str]:
    """The flow run's log, oldest first, once it holds `wanted` (logs reach the API in batches)."""
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])),
                sort=LogSort.TIMESTAMP_ASC,
            )
            messages = [log.message for log in logs]
            if any(wanted in m for m in messages) or time.monotonic() > deadline:
                return messages
            time.sleep(0.5)


def _progress(run_id):
    with get_client(sync_client=True) as client:
        [artifact] = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[PROGRESS_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]),
            )
        )
    return artifact


def test_progress_moves_as_rollouts_are_stored_within_one_batch(prefect_api, tmp_path):
    # 200 rollouts, one batch, 4 at a time at 200 ms each: at least 10 s of collecting, over
    # which the progress publisher (every 2 s) crosses several tenths of the run
    config = EvalConfig(
        benchmark="arithmetic-smoke",
        limit=50,
        concurrency=4,
        out=str(tmp_path / "run"),
        model={"faults": {"latency_ms": 200}},
    )
    state = evaluation_loop(config, return_state=True)
    assert state.is_completed(), state
    run_id = state.state_details.flow_run_id
    messages = _messages(run_id, "batch 1 of 1 done")
    done = next(i for i, m in enumerate(messages) if m.startswith("batch 1 of 1 done"))
    stored = [
        int(found.group(1))
        for m in messages[:done]
        if (found := re.match(r"progress: (\d+) of 200 rollouts stored", m))
    ]
    # several lines while the one batch ran, each further on
    assert len([n for n in stored if 0 < n < 200]) >= 2, messages
    assert stored == sorted(set(stored)), stored
    artifact = _progress(run_id)
    assert artifact.data == 100.0
    assert artifact.description == "200 of 200 rollouts stored"


def test_an_unhealthy_run_ends_failed_naming_the_failing_checks(prefect_api, tmp_path):
    # half the calls answered 500 after every retry: far over the 5% failed_share allows
    config = EvalConfig(
        benchmark="arithmetic-smoke",
        limit=10,
        repeats=2,
        out=str(tmp_path / "run"),
        model={"max_retries": 0, "faults": {"rate_500": 0.5}},
    )
    state = evaluation_loop(config, return_state=True)
    assert state.is_failed() and state.name == "Unhealthy", state
    assert "health gate failed (failed_share" in state.message
    with pytest.raises(UnhealthyRun) as raised:
        state.result()
    # the run's results come with it: what `gym eval run` prints before exiting 2
    assert raised.value.result.analysis.health.gate == "fail"
    assert (tmp_path / "run" / "report.html").exists()


def test_the_default_form_run_twice_gets_two_folders(prefect_api, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    form = RunForm(benchmark="arithmetic-smoke", limit=3, repeats=1)
    assert "{flow_run_id}" in form.out
    outs = []
    for _ in range(2):
        state = evaluation_loop(form.eval_config(), return_state=True)
        assert state.is_completed(), state
        outs.append(Path(state.result().run_dir))
        assert outs[-1].name == str(state.state_details.flow_run_id)
    assert outs[0] != outs[1] and outs[0].parent == outs[1].parent


def test_a_taken_folder_is_refused_naming_the_form_fields(prefect_api, tmp_path):
    config = EvalConfig(benchmark="arithmetic-smoke", limit=3, repeats=1, out=str(tmp_path / "r"))
    assert evaluation_loop(config, return_state=True).is_completed()
    state = evaluation_loop(config, return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match="already holds rollouts") as raised:
        state.result()
    message = str(raised.value)
    assert "the form's resume field" in message and "the form's config.out field" in message
    assert "--resume" not in message and "--out" not in message
