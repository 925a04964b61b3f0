"""The Prefect UI as the front door, for real (tests/flows/deployed.py: a `prefect server`, `prefect
deploy --all`, a process worker and `gym serve reports`). The eval-run deployment's form (its
parameter schema) offers the registry's benchmarks, describes its fields and states its bounds; the
server refuses what the schema rules out before any run exists; a run from the form gets a findable
name and tags, logs gymflow's own lines, and its report artifact links to a URL that serves the
report. Headless Chromium keeps screenshots of the form and of the finished run under
test-artifacts/. Slow (a flow-run process, a browser): one test, every wait bounded."""

from __future__ import annotations

import re

import httpx
import pytest

from gymflow.environments.registry import benchmark_files
from tests.conftest import ROOT, require_tool
from tests.flows.deployed import POOL, Deployment, call_api, final_state, wait_for
from tests.flows.ui_pages import capture
from tests.reports.browser import FLAGS, chromium

pytestmark = pytest.mark.prefect

SHOTS = ROOT / "test-artifacts"
#: The report tests' flags, except that the Prefect UI on this machine must be reachable.
UI_FLAGS = (
    *(f for f in FLAGS if not f.startswith("--host-resolver-rules")),
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


def definitions(deployment: dict) -> dict[str, dict]:
    schema = deployment["parameter_openapi_schema"]
    return {name: d["properties"] for name, d in schema["definitions"].items()}


def check_the_form(deployment: dict) -> None:
    form = definitions(deployment)
    run = form["RunForm"]
    assert run["benchmark"]["enum"] == sorted(benchmark_files())
    schema = deployment["parameter_openapi_schema"]["definitions"]["RunForm"]
    assert schema["required"] == ["benchmark"]
    assert form["SamplingForm"]["temperature"]["maximum"] == 2.0
    assert form["ScaleOptions"]["shards"]["minimum"] == 1
    assert "Seconds" in form["ModelForm"]["timeout_s"]["description"]
    assert "shard" not in run and "faults" not in form["ModelForm"]
    for model in ("RunForm", "ModelForm", "SamplingForm", "HarnessForm", "ScaleOptions"):
        for name, field in form[model].items():
            assert field.get("description"), f"{model}.{name}"
            assert "anyOf" not in field, f"{model}.{name}"


def refused(api: str, deployment_id: str, config: dict) -> httpx.Response:
    return httpx.post(
        f"{api}/deployments/{deployment_id}/create_flow_run",
        json={"parameters": {"config": config}},
        timeout=30,
    )


def test_a_run_from_the_form_links_to_its_served_report(deployment: Deployment) -> None:
    api, reports_url, served = deployment.api, deployment.reports_url, deployment.served
    eval_run = call_api("GET", f"{api}/deployments/name/eval-run/eval-run")
    check_the_form(eval_run)
    deployment_id = eval_run["id"]
    shard = call_api("GET", f"{api}/deployments/name/eval-shard/eval-shard")
    assert shard["description"].startswith("Internal")
    nightly = call_api("GET", f"{api}/deployments/name/nightly/nightly-arithmetic-smoke")
    assert [s["schedule"]["timezone"] for s in nightly["schedules"]] == ["UTC"]
    assert nightly["parameters"]["scale"]["work_pool"] == POOL

    # what the schema rules out never becomes a run
    of_the_form = {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}}
    before = call_api("POST", f"{api}/flow_runs/filter", of_the_form)
    for bad in (
        {"benchmark": "no-such-benchmark"},
        {"benchmark": "arithmetic-smoke", "sampling": {"temperature": 5}},
        {"benchmark": "arithmetic-smoke", "shard": {"index": 3, "count": 2}},
    ):
        reply = refused(api, deployment_id, bad)
        assert reply.status_code == 409, (bad, reply.status_code, reply.text)
    assert call_api("POST", f"{api}/flow_runs/filter", of_the_form) == before

    config = {"benchmark": "arithmetic-smoke", "limit": 6, "out": str(served / "runs" / "{date}")}
    created = call_api(
        "POST",
        f"{api}/deployments/{deployment_id}/create_flow_run",
        {"parameters": {"config": config}},
    )
    run = final_state(api, created["id"], timeout=600)
    worker_log = (deployment.logs / "worker.log").read_text()
    assert run["state_type"] == "COMPLETED", (run["state"], worker_log[-4000:])

    wanted = (
        "batch 1 of 1 done",
        "arithmetic-smoke · gymflow-local-policy: pass@1",
        f"report: {reports_url}/runs/",
    )

    def logged() -> str | None:
        # the run's last lines reach the server just after its final state: the worker (and so
        # the flow's process) keeps running until they are there
        query = {"logs": {"flow_run_id": {"any_": [run["id"]]}}, "sort": "TIMESTAMP_ASC"}
        logs = call_api("POST", f"{api}/logs/filter", query)
        text = "\n".join(entry["message"] for entry in logs)
        return text if all(line in text for line in wanted) else None

    messages = wait_for("gymflow's log lines on the flow run", logged, timeout=120)

    assert re.fullmatch(
        r"arithmetic-smoke_gymflow-local-policy_\d{4}-\d\d-\d\dT\d{4}Z", run["name"]
    ), run["name"]
    for tag in (
        "benchmark:arithmetic-smoke",
        "environment:arithmetic",
        "model:gymflow-local-policy",
        "harness:single_turn",
    ):
        assert tag in run["tags"], run["tags"]

    artifacts = call_api(
        "POST",
        f"{api}/artifacts/filter",
        {"artifacts": {"flow_run_id": {"any_": [created["id"]]}}},
    )
    by_key = {a["key"]: a for a in artifacts}
    assert len(by_key) == len(artifacts), "one artifact per key"
    link = re.search(r"\]\((http://[^)]+)\)", by_key["gymflow-report"]["data"]).group(1)
    assert link.startswith(f"{reports_url}/runs/")
    page = httpx.get(link, timeout=30)
    assert page.status_code == 200
    assert "pass@1" in page.text and "<html" in page.text.lower()
    assert link in by_key["gymflow-summary"]["data"]
    assert f"report: {link}" in messages

    binary = require_tool("chromium")
    ui = deployment.ui
    with chromium(binary, UI_FLAGS) as tools:
        form_text = capture(
            tools,
            f"{ui}/deployments/deployment/{deployment_id}/run",
            ["Benchmark", "arithmetic-smoke"],
            SHOTS / "prefect-form.png",
        )
        run_text = capture(
            tools,
            f"{ui}/runs/flow-run/{run['id']}",
            [run["name"], "Completed", f"report: {link}"],
            SHOTS / "prefect-run.png",
        )
        artifacts_text = capture(
            tools,
            f"{ui}/runs/flow-run/{run['id']}",
            ["gymflow-summary", "gymflow-report"],
            SHOTS / "prefect-run-artifacts.png",
            click=["Artifacts"],
        )
        summary_text = capture(
            tools,
            f"{ui}/artifacts/artifact/{by_key['gymflow-summary']['id']}",
            ["Recommended next action", "pass@k"],
            SHOTS / "prefect-summary.png",
        )
    assert "The benchmark" in form_text
    assert "benchmark:arithmetic-smoke" in run_text
    assert "How did it do" in artifacts_text
    assert link in summary_text and "Coverage: expected 24" in summary_text
