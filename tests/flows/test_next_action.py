"""One next action everywhere: a run with missing rollouts reads the same recommendation in the
flow run's Prefect artifact, in the report the flow wrote, and in `gym eval diagnose`; and the
flow's analysis, cached by Prefect as JSON, comes back as the same typed results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from gymflow.analysis.decide import COMPLETE_RUN, LABELS
from gymflow.analysis.results import RunAnalysis
from gymflow.flows.artifacts import SUMMARY_KEY, headline_rows, summary_markdown
from gymflow.flows.eval_run import RunOutcome, analyse_run
from gymflow.reports.serving import ReportLink
from gymflow.steps.analysis import analyse_store
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym
from tests.reports import pages


@flow(name="analyse-for-test")
def _analyse(run_dir: str) -> RunOutcome:
    return analyse_run(run_dir)


@flow(name="analyse-twice-for-test")
def _analyse_twice(run_dir: str) -> tuple:
    first = analyse_store(run_dir, return_state=True)
    second = analyse_store(run_dir, return_state=True)
    return second.name, first.result(), second.result()


def _incomplete_run(path: Path) -> Path:
    """Two tasks of four repeats; one task has only one rollout: three are missing."""
    b = StoreBuilder(RunMeta(repeats=4))
    b.task("t0", 10)
    b.task("t1", 11)
    b.fill("t0", "1100")
    b.fill("t1", "0")
    return b.write(path)


@pytest.fixture(scope="module")
def incomplete(prefect_api, tmp_path_factory) -> dict:
    run_dir = _incomplete_run(tmp_path_factory.mktemp("next-action") / "run")
    state = _analyse(str(run_dir), return_state=True)
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
            )
        )
    return {
        "run_dir": run_dir,
        "result": state.result(),
        "summary": next(a.data for a in artifacts if a.key == SUMMARY_KEY),
    }


def test_missing_rollouts_read_the_same_next_action_everywhere(incomplete) -> None:
    run_dir, result = incomplete["run_dir"], incomplete["result"]
    decision = result.analysis.decision
    assert decision.action == COMPLETE_RUN and "3 of the 8 expected rollouts" in decision.why
    # the Prefect artifact
    summary = incomplete["summary"]
    action = summary.split("## Recommended next action")[1].split("##")[0]
    assert f"**{LABELS[COMPLETE_RUN]}**: {decision.why}" in action
    # the report the flow wrote, from the same analysis
    page = pages.read(Path(result.report))
    assert page.fields["decision.action"] == COMPLETE_RUN
    assert LABELS[COMPLETE_RUN] in page.text
    # the CLI, which has no flow: the same `decide`
    payload = json.loads(
        gym("eval", "diagnose", str(run_dir), "--json", cwd=run_dir, check=True).stdout
    )
    assert payload["decision"] == decision.as_json()
    text = gym("eval", "diagnose", str(run_dir), cwd=run_dir, check=True).stdout
    assert f"next action: {LABELS[COMPLETE_RUN]}" in text


def test_the_cached_analysis_comes_back_as_the_typed_results(incomplete) -> None:
    second, computed, cached = _analyse_twice(str(incomplete["run_dir"]))
    assert second == "Cached"
    assert isinstance(cached, RunAnalysis) and cached == computed
    assert cached.as_json() == computed.as_json()
    assert cached == incomplete["result"].analysis


def test_the_summary_names_the_verifier_version_and_whether_it_was_simulated(incomplete) -> None:
    profile = incomplete["result"].analysis.profile
    summary = incomplete["summary"]
    assert f"Verifier version: `{profile.verifier_version}`" in summary
    assert not profile.simulated and "Simulated" not in summary  # the answers name model-a
    simulated = incomplete["result"].analysis.model_copy(
        update={"profile": profile.model_copy(update={"simulated": True})}
    )
    link = ReportLink(path="report.html", url=None, note="")
    assert "**Simulated**: gymflow's simulated policy server" in summary_markdown(simulated, link)
    rows = {row["metric"]: row["value"] for row in headline_rows(profile, simulated.health)}
    assert rows["verifier version"] == profile.verifier_version and rows["policy"] == "model"
