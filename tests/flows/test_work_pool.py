"""The team setup for real (tests/flows/deployed.py: a `prefect server`, a process worker, `prefect
deploy --all` from prefect.yaml): an eval-run with 2 shards on the work pool where one shard fails,
and the UI's Retry. Slow (a dozen flow-run processes): one test, every wait bounded."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import EvalConfig
from gymflow.flows.artifacts import PROGRESS_KEY
from gymflow.flows.parameters import ScaleOptions, shard_dir
from gymflow.rollouts.collection import flow_run_collection
from gymflow.store.db import store_path
from tests.conftest import ROOT, require_tool
from tests.flows.deployed import POOL, Deployment, call_api, final_state, wait_for
from tests.flows.test_shards import locked
from tests.flows.test_ui import UI_FLAGS
from tests.flows.ui_pages import capture
from tests.reports.browser import chromium

pytestmark = pytest.mark.prefect


def shard_runs(api: str, shard_root: Path) -> dict[int, list[str]]:
    """State of every eval-shard flow run writing under `shard_root`, per shard index, oldest
    first (the deployment's other tests run on the same server)."""
    runs = call_api(
        "POST",
        f"{api}/flow_runs/filter",
        {"flows": {"name": {"any_": ["eval-shard"]}}, "sort": "EXPECTED_START_TIME_ASC"},
    )
    by_shard: dict[int, list[str]] = {}
    ours = [r for r in runs if r["parameters"]["config"]["out"].startswith(str(shard_root))]
    for run in sorted(ours, key=lambda r: r["created"]):
        by_shard.setdefault(run["parameters"]["config"]["shard"]["index"], []).append(
            run["state_type"]
        )
    return by_shard


def planned_shard(created: dict, config: dict, scale: ScaleOptions, index: int) -> Path:
    """The store of shard `index` of the flow run just `created` (not yet started): in the
    collection the run plans, named after its flow run, which its Retry names again."""
    collection = flow_run_collection(
        datetime.fromisoformat(created["expected_start_time"]), created["id"]
    )
    eval_config = EvalConfig.model_validate(config)
    planned = scale.model_copy(update={"collection": collection})
    failing = store_path(shard_dir(eval_config, planned, eval_config.fingerprint(), index))
    failing.parent.mkdir(parents=True)
    return failing


def assert_artifacts_updated_in_place(api: str, run_id: str) -> None:
    """After the retry, one artifact per key, and none still tells of the failed attempt."""
    artifacts = call_api(
        "POST", f"{api}/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}}
    )
    keyed = [a for a in artifacts if a["key"]]  # Prefect's persisted-result records have none
    keys = [a["key"] for a in keyed]
    assert sorted(keys) == sorted(set(keys)), keys
    by_key = {a["key"]: a for a in keyed}
    assert "Shards failed" not in by_key["gymflow-summary"]["data"]
    assert "Recommended next action" in by_key["gymflow-summary"]["data"]
    assert by_key["gymflow-progress"]["data"] == 100.0
    assert "FAILED" not in by_key["gymflow-progress"]["description"]


def assert_stored_once(run_dir: Path, rollouts: int) -> None:
    """The run store holds every rollout and model call once."""
    con = duckdb.connect(str(store_path(run_dir)), read_only=True)
    try:
        stored, distinct, expected, calls, distinct_calls = con.execute(
            """
            SELECT (SELECT count(*) FROM rollouts),
                   (SELECT count(DISTINCT (task_id, repeat_index)) FROM rollouts),
                   (SELECT count(*) FROM tasks) * (SELECT max(repeats) FROM runs),
                   (SELECT count(*) FROM model_calls),
                   (SELECT count(DISTINCT (rollout_id, call_index, attempt)) FROM model_calls)
            """
        ).fetchone()
    finally:
        con.close()
    assert stored == distinct == expected == rollouts
    assert calls == distinct_calls


def retry_logged(api: str, run_id: str) -> bool:
    logs = call_api("POST", f"{api}/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}})
    text = "\n".join(entry["message"] for entry in logs)
    return all(
        line in text
        for line in ("shard 1 of 2 failed", "shard 0 of 2 skipped", "shard 1 of 2 done")
    )


def test_eval_run_on_a_work_pool_retried_from_the_ui(deployment: Deployment, tmp_path: Path):
    api = deployment.api
    config = {"benchmark": "arithmetic-smoke", "limit": 12, "out": str(tmp_path / "run")}
    shared = tmp_path / "shared"
    scale = ScaleOptions(
        shards=2,
        work_pool=POOL,
        shard_root=str(shared),
        shard_retries=0,  # task retries are tested in test_shards; here each run is a process
        shard_timeout_s=300,
    )

    deployment_id = call_api("GET", f"{api}/deployments/name/eval-run/eval-run")["id"]
    parameters = {"config": config, "scale": scale.model_dump(mode="json")}
    created = call_api(
        "POST", f"{api}/deployments/{deployment_id}/create_flow_run", {"parameters": parameters}
    )
    failing = planned_shard(created, config, scale, 1)
    # another process holds shard 1's store, so shard 1 fails
    with locked(failing):
        first = final_state(api, created["id"], timeout=600)
    assert first["state_type"] == "FAILED", first["state"]
    assert "1 of 2 shards failed" in first["state"]["message"]
    assert shard_runs(api, shared) == {0: ["COMPLETED"], 1: ["FAILED"]}

    # the Prefect UI's Retry button
    retried = call_api(
        "POST",
        f"{api}/flow_runs/{created['id']}/set_state",
        {"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}},
    )
    assert retried["status"] == "ACCEPT", retried
    second = final_state(api, created["id"], timeout=600)
    log = (deployment.logs / "worker.log").read_text()
    assert second["state_type"] == "COMPLETED", (second["state"], log[-4000:])
    assert second["run_count"] == 2
    assert_artifacts_updated_in_place(api, created["id"])
    wait_for("the retry's log lines", lambda: retry_logged(api, created["id"]), 60)

    # only the failed shard ran again, as its own flow run retried: it ends green, not red
    assert shard_runs(api, shared) == {0: ["COMPLETED"], 1: ["COMPLETED"]}
    [shard_1] = [
        r
        for r in call_api(
            "POST", f"{api}/flow_runs/filter", {"flows": {"name": {"any_": ["eval-shard"]}}}
        )
        if r["parameters"]["config"]["out"].startswith(str(shared))
        and r["parameters"]["config"]["shard"]["index"] == 1
    ]
    assert shard_1["run_count"] == 2, shard_1
    assert_stored_once(tmp_path / "run", 12 * 4)


def test_local_shards_retried_from_the_ui_end_green(deployment: Deployment, tmp_path: Path):
    """Shards run here, as subflows of the deployment's run: after the Retry, the failed
    shard's own flow run ran again and reads Completed (Prefect alone would leave it red and
    start a second one beside it)."""
    api = deployment.api
    config = {"benchmark": "arithmetic-smoke", "limit": 12, "out": str(tmp_path / "run")}
    scale = ScaleOptions(shards=2, shard_retries=0)
    deployment_id = call_api("GET", f"{api}/deployments/name/eval-run/eval-run")["id"]
    parameters = {"config": config, "scale": scale.model_dump(mode="json")}
    created = call_api(
        "POST", f"{api}/deployments/{deployment_id}/create_flow_run", {"parameters": parameters}
    )
    failing = planned_shard(created, config, scale, 1)

    def shards() -> list[dict]:
        query = {"flow_runs": {"parent_flow_run_id": {"any_": [created["id"]]}}}
        found = call_api("POST", f"{api}/flow_runs/filter", query)
        return sorted(found, key=lambda r: r["parameters"]["config"]["shard"]["index"])

    with locked(failing):  # another process holds shard 1's store, so shard 1 fails
        first = final_state(api, created["id"], timeout=600)
    assert first["state_type"] == "FAILED", first["state"]
    assert [r["state_type"] for r in shards()] == ["COMPLETED", "FAILED"]

    retried = call_api(
        "POST",
        f"{api}/flow_runs/{created['id']}/set_state",
        {"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}},
    )
    assert retried["status"] == "ACCEPT", retried
    second = final_state(api, created["id"], timeout=600)
    log = (deployment.logs / "worker.log").read_text()
    assert second["state_type"] == "COMPLETED", (second["state"], log[-4000:])
    after = shards()
    assert [r["state_type"] for r in after] == ["COMPLETED", "COMPLETED"], after
    assert [r["run_count"] for r in after] == [1, 2]
    # the Retry continued the collection the first attempt planned, where shard 1 was held
    collection = failing.parent.parent.name
    assert [r["parameters"]["config"]["shard"]["collection"] for r in after] == [collection] * 2
    assert_stored_once(tmp_path / "run", 12 * 4)
    with chromium(require_tool("chromium"), UI_FLAGS) as tools:
        page = capture(
            tools,
            f"{deployment.ui}/runs/flow-run/{after[1]['id']}",
            [after[1]["name"], "Completed"],
            ROOT / "test-artifacts" / "ui" / "local-shard-retried.png",
        )
    assert "Failed" not in page.split("Completed")[0], page[:2000]


def test_a_pool_run_s_progress_moves_within_its_shards(deployment: Deployment, tmp_path: Path):
    """Each shard runs in a worker's process: the run follows the rollouts they store (their
    progress artifacts), not only the shards that finished."""
    api = deployment.api
    config = {
        "benchmark": "arithmetic-smoke",
        "out": str(tmp_path / "run"),
        # 100 rollouts a shard, 4 at a time, 400 ms each: about 10 s collecting per shard
        "concurrency": 4,
        "test_only": {"faults": {"latency_ms": 400}},
    }
    scale = ScaleOptions(shards=2, work_pool=POOL, shard_retries=0, shard_timeout_s=600)
    deployment_id = call_api("GET", f"{api}/deployments/name/eval-run/eval-run")["id"]
    parameters = {"config": config, "scale": scale.model_dump(mode="json")}
    created = call_api(
        "POST", f"{api}/deployments/{deployment_id}/create_flow_run", {"parameters": parameters}
    )

    def progress() -> str:
        ours = {"flow_run_id": {"any_": [created["id"]]}, "key": {"any_": [PROGRESS_KEY]}}
        query = {"artifacts": ours}
        found = call_api("POST", f"{api}/artifacts/filter", query)
        return (found[0]["description"] or "") if found else ""

    def within_shards() -> str | None:
        found = re.fullmatch(r"(\d+) of 200 rollouts stored; 0 of 2 shards finished", progress())
        return found.group(0) if found and 0 < int(found.group(1)) < 200 else None

    wait_for("a count within the shards", within_shards, timeout=600, every=0.5)
    done = final_state(api, created["id"], timeout=600)
    log = (deployment.logs / "worker.log").read_text()
    assert done["state_type"] == "COMPLETED", (done["state"], log[-4000:])
    assert progress() == "200 of 200 rollouts stored; 2 of 2 shards finished"
    assert_stored_once(tmp_path / "run", 200)
