"""Flow runs as the Prefect UI shows them, for real (tests/flows/deployed.py: a `prefect server`,
`prefect deploy --all`, a process worker and `gym serve reports`), driven through the API the UI
calls and read back in headless Chromium:

- progress that moves while one unsharded batch collects (artifact and log lines);
- the form's folder pattern run twice, two folders; a Run Name typed in the form kept;
- Cancel ending Cancelled with no ERROR line, and a Retry's summary saying it runs;
- an unhealthy run ending Failed ("Unhealthy") with the failing checks in its message;
- the nightly's own page carrying its summary, report link, progress and gate, its shards
  named apart from it.

Screenshots of the form, a running run's progress, the nightly's page go to test-artifacts/ui/
(docs/images/ holds copies). Slow (a dozen flow-run processes): every wait is bounded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool
from tests.flows.deployed import POOL, Deployment, call_api, final_state, flow_run, wait_for
from tests.flows.test_ui import UI_FLAGS
from tests.flows.ui_pages import capture
from tests.reports.browser import chromium

pytestmark = pytest.mark.prefect

SHOTS = ROOT / "test-artifacts" / "ui"
#: A run slow enough to watch: 200 rollouts, 4 at a time, 150 ms each (about 8 s collecting).
SLOW = {"concurrency": 4, "test_only": {"faults": {"latency_ms": 150}}}


def _start(api: str, deployment: str, parameters: dict, **fields) -> dict:
    found = call_api("GET", f"{api}/deployments/name/{deployment}")
    return call_api(
        "POST",
        f"{api}/deployments/{found['id']}/create_flow_run",
        {"parameters": parameters, **fields},
    )


def _artifacts(api: str, run_id: str) -> dict[str, dict]:
    found = call_api(
        "POST", f"{api}/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}}
    )
    return {a["key"]: a for a in found if a["key"]}


def _logs(api: str, run_id: str) -> list[dict]:
    query = {"logs": {"flow_run_id": {"any_": [run_id]}}, "sort": "TIMESTAMP_ASC"}
    return call_api("POST", f"{api}/logs/filter", query)


def _logged(api: str, run_id: str, line: str) -> list[dict] | None:
    logs = _logs(api, run_id)
    return logs if any(line in entry["message"] for entry in logs) else None


def _stored(artifact: dict | None) -> int:
    found = re.match(r"(\d+) of \d+ rollouts stored", (artifact or {}).get("description") or "")
    return int(found.group(1)) if found else 0


def test_a_run_from_the_form_shows_progress_keeps_its_name_and_folder(deployment: Deployment):
    api, served = deployment.api, deployment.served
    config = {
        "benchmark": "arithmetic-smoke",
        "out": str(served / "ui" / "{date}" / "{flow_run_id}"),
        **SLOW,
    }
    typed = "baseline-run"  # two lowercase words, as Prefect's own names are: still typed
    first = _start(api, "eval-run/eval-run", {"config": config}, name=typed)

    # while the one batch collects, the progress artifact moves, and the log says so
    def moving() -> int | None:
        stored = _stored(_artifacts(api, first["id"]).get("gymflow-progress"))
        return stored if 0 < stored < 200 else None

    wait_for("progress within the batch", moving, timeout=600, every=0.5)
    with chromium(require_tool("chromium"), UI_FLAGS) as tools:
        running = capture(
            tools,
            f"{deployment.ui}/runs/flow-run/{first['id']}",
            ["rollouts stored"],
            SHOTS / "running-progress.png",
            click=["Artifacts"],
        )
        assert "rollouts stored" in running
        form = capture(
            tools,
            f"{deployment.ui}/deployments/deployment/{first['deployment_id']}/run",
            ["Benchmark", "arithmetic-smoke"],
            SHOTS / "form.png",
        )
    # the benchmark is required: the form does not call it optional
    assert re.search(r"Benchmark\s*(\n|\s)*\(Optional\)", form) is None, form[:2000]

    second = _start(api, "eval-run/eval-run", {"config": {**config, "limit": 5}})
    runs = [final_state(api, run["id"], timeout=900) for run in (first, second)]
    log = (deployment.logs / "worker.log").read_text()
    assert [r["state_type"] for r in runs] == ["COMPLETED", "COMPLETED"], log[-4000:]
    assert runs[0]["name"] == typed  # typed in the form: kept
    assert runs[1]["name"].startswith("arithmetic-smoke_gymflow-local-policy_")
    folders = [Path(r["parameters"]["config"]["out"]) for r in runs]
    assert folders[0] == folders[1], "the same pattern"
    day = next((served / "ui").iterdir())
    assert sorted(p.name for p in day.iterdir()) == sorted(r["id"] for r in runs)

    logs = wait_for("the last log lines", lambda: _logged(api, first["id"], "batch 1 of 1"), 120)
    messages = [entry["message"] for entry in logs]
    done = next(i for i, m in enumerate(messages) if m.startswith("batch 1 of 1 done"))
    during = [m for m in messages[:done] if re.match(r"progress: \d+ of 200 rollouts stored", m)]
    assert len(during) >= 2, messages
    progress = _artifacts(api, first["id"])["gymflow-progress"]
    assert progress["data"] == 100.0 and progress["description"] == "200 of 200 rollouts stored"


def test_cancel_ends_cancelled_without_errors_and_a_retry_says_it_runs(deployment: Deployment):
    api, served = deployment.api, deployment.served
    config = {"benchmark": "arithmetic-smoke", "out": str(served / "cancelled"), **SLOW}
    worker_log = deployment.logs / "worker.log"
    # the worker serves this group's other tests too (a failing shard logs these lines): only
    # what it wrote from here on is this run's
    since = worker_log.stat().st_size if worker_log.exists() else 0
    run = _start(api, "eval-run/eval-run", {"config": config})
    wait_for(
        "a few rollouts stored",
        lambda: _stored(_artifacts(api, run["id"]).get("gymflow-progress")) >= 20,
        timeout=600,
        every=0.5,
    )
    # the UI's Cancel button
    call_api("POST", f"{api}/flow_runs/{run['id']}/set_state", {"state": {"type": "CANCELLING"}})
    cancelled = final_state(api, run["id"], timeout=300)
    assert cancelled["state_type"] == "CANCELLED", cancelled["state"]
    wait_for("the stop's line", lambda: _logged(api, run["id"], "finished rollouts are"), 60)
    errors = [e["message"] for e in _logs(api, run["id"]) if e["level"] >= 40]
    assert errors == [], errors
    with worker_log.open("rb") as log:
        log.seek(since)
        worker = log.read().decode(errors="replace")
    assert "Check the flow run logs for an unhandled exception" not in worker
    assert "Engine execution exited with unexpected exception" not in worker

    # the UI's Retry button: while it runs, the summary says so. Prefect's worker marks the run
    # Cancelled once more after the process it stopped has ended; a Retry pressed before that
    # lands is cancelled by it ("Flow run was cancelled successfully."), and is pressed again.
    for attempt in (2, 3):
        call_api(
            "POST",
            f"{api}/flow_runs/{run['id']}/set_state",
            {"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}},
        )
        said = f"# Attempt {attempt} running"
        wait_for(
            f"the summary saying {said!r}",
            lambda said=said: (
                (_artifacts(api, run["id"]).get("gymflow-summary") or {}).get("data") or ""
            ).startswith(said),
            timeout=600,
            every=0.5,
        )
        retried = final_state(api, run["id"], timeout=900)
        if (retried["state"]["message"] or "") != "Flow run was cancelled successfully.":
            break
    assert retried["state_type"] == "COMPLETED", retried["state"]
    assert "Recommended next action" in _artifacts(api, run["id"])["gymflow-summary"]["data"]


def test_cancelling_a_sharded_run_logs_no_error_anywhere(deployment: Deployment):
    """Local shards are subflows in the worker's process: the Cancel stops them too, and the
    parent and each shard end Cancelled, with no ERROR line in any of their logs."""
    api, served = deployment.api, deployment.served
    # slower than SLOW: a shard of 100 rollouts at 4 in flight and 150 ms each ends in about 4 s,
    # before the parent's progress (every 2 s) shows 20 stored and the Cancel is pressed
    slower = {**SLOW, "test_only": {"faults": {"latency_ms": 1000}}}
    config = {"benchmark": "arithmetic-smoke", "out": str(served / "cancelled-shards"), **slower}
    worker_log = deployment.logs / "worker.log"
    since = worker_log.stat().st_size if worker_log.exists() else 0  # this run's lines only
    run = _start(api, "eval-run/eval-run", {"config": config, "scale": {"shards": 2}})
    wait_for(
        "a few rollouts stored",
        lambda: _stored(_artifacts(api, run["id"]).get("gymflow-progress")) >= 20,
        timeout=600,
        every=0.5,
    )
    call_api("POST", f"{api}/flow_runs/{run['id']}/set_state", {"state": {"type": "CANCELLING"}})
    cancelled = final_state(api, run["id"], timeout=300)
    assert cancelled["state_type"] == "CANCELLED", cancelled["state"]
    query = {"flow_runs": {"parent_flow_run_id": {"any_": [run["id"]]}}}
    shards = call_api("POST", f"{api}/flow_runs/filter", query)
    assert len(shards) == 2
    shards = [final_state(api, shard["id"], timeout=120) for shard in shards]
    assert [s["state_type"] for s in shards] == ["CANCELLED", "CANCELLED"], shards
    wait_for("the stop's line", lambda: _logged(api, run["id"], "finished rollouts are"), 60)
    errors = [
        (flow_run_id, entry["message"])
        for flow_run_id in [run["id"], *(s["id"] for s in shards)]
        for entry in _logs(api, flow_run_id)
        if entry["level"] >= 40
    ]
    assert errors == [], errors
    with worker_log.open("rb") as log:
        log.seek(since)
        worker = log.read().decode(errors="replace")
    assert "Engine execution exited with unexpected exception" not in worker


def test_an_unhealthy_run_ends_failed_with_its_failing_checks(deployment: Deployment):
    api, served = deployment.api, deployment.served
    config = {
        "benchmark": "arithmetic-smoke",
        "limit": 10,
        "out": str(served / "unhealthy"),
        "model": {"max_retries": 0},
        "test_only": {"faults": {"rate_500": 0.5}},
    }
    run = final_state(api, _start(api, "eval-run/eval-run", {"config": config})["id"], 600)
    assert run["state_type"] == "FAILED" and run["state_name"] == "Unhealthy", run["state"]
    assert "health gate failed (failed_share" in run["state"]["message"]
    # its results are still there: the summary says unhealthy, the report is linked
    by_key = _artifacts(api, run["id"])
    assert "Health: **unhealthy" in by_key["gymflow-summary"]["data"]
    assert "gymflow-report" in by_key


def test_the_nightly_page_carries_its_own_results(deployment: Deployment):
    api, served = deployment.api, deployment.served
    parameters = {
        "config": {
            "benchmark": "arithmetic-smoke",
            "limit": 8,
            "out": str(served / "n" / "{date}"),
        },
        "scale": {"shards": 2, "work_pool": POOL, "shard_retries": 0, "shard_timeout_s": 600},
        "gate": {"history": str(served / "n"), "baseline": "", "margin": 0.02},
    }
    started = _start(api, "nightly/nightly-arithmetic-smoke", parameters)
    run = final_state(api, started["id"], timeout=900)
    log = (deployment.logs / "worker.log").read_text()
    assert run["state_type"] == "COMPLETED", (run["state"], log[-4000:])
    by_key = _artifacts(api, run["id"])
    assert {"gymflow-summary", "gymflow-report", "gymflow-progress", "gymflow-headline"} <= set(
        by_key
    ), sorted(by_key)
    # the first night has nothing to compare with; its gate says so, beside the report's link
    gate = by_key["gymflow-regression-gate"]["data"]
    assert "regression gate: nothing to compare with" in gate, gate
    assert f"Report: {deployment.reports_url}/n/" in gate
    assert by_key["gymflow-progress"]["description"] == (
        "32 of 32 rollouts stored; 2 of 2 shards finished"
    )
    # the shards are its children, each named apart from it
    children = call_api(
        "POST",
        f"{api}/flow_runs/filter",
        {"flow_runs": {"parent_flow_run_id": {"any_": [run["id"]]}}},
    )
    names = sorted(child["name"] for child in children)
    assert len(names) == 2 and all(re.search(r"-shard-[01]-of-2$", n) for n in names), names
    assert run["name"] not in names
    wait_for("the nightly's gate line", lambda: _logged(api, run["id"], "regression gate"), 60)
    with chromium(require_tool("chromium"), UI_FLAGS) as tools:
        page = capture(
            tools,
            f"{deployment.ui}/runs/flow-run/{run['id']}",
            [run["name"], "gymflow-summary", "gymflow-regression-gate"],
            SHOTS / "nightly.png",
            click=["Artifacts"],
        )
    assert "gymflow-report" in page
    assert flow_run(api, run["id"])["state_type"] == "COMPLETED"
