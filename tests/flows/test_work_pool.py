"""The team setup for real: a `prefect server`, a process worker, `prefect deploy --all` from
prefect.yaml, an eval-run with 2 shards on the work pool where one shard fails, and the UI's Retry.

Slow (a server start, deployments, a dozen flow-run processes): one test, every wait bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import httpx
import pytest

from gymflow.config import EvalConfig
from gymflow.flows.parameters import ScaleOptions, shard_dir
from gymflow.simulated.local_server import free_port
from gymflow.store.db import store_path
from tests.conftest import ROOT
from tests.flows.test_shards import locked

pytestmark = pytest.mark.prefect

POOL = "gymflow-process"  # the work pool prefect.yaml names
PREFECT = str(Path(sys.executable).parent / "prefect")
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (twice if needed: a process worker can ignore the first), then wait."""
    for _ in range(2):
        if process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue
    process.kill()
    process.wait(timeout=20)


@contextmanager
def started(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("w") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            yield process
        finally:
            stop(process)


def wait_for(what: str, check, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def healthy(api: str) -> bool:
    try:
        return httpx.get(f"{api}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


#: Answers Prefect's own client retries (a busy server's SQLite answers 503 for a moment); the UI
#: and the CLI would retry them too, so the test does, and fails on anything else with the body.
TRANSIENT = {408, 429, 502, 503}


def call_api(method: str, url: str, json: dict | None = None) -> dict | list:
    for _ in range(10):
        reply = httpx.request(method, url, json=json, timeout=10)
        if reply.status_code not in TRANSIENT:
            break
        time.sleep(1)
    assert reply.is_success, f"{method} {url}: {reply.status_code} {reply.text}"
    return reply.json()


def flow_run(api: str, run_id: str) -> dict:
    return call_api("GET", f"{api}/flow_runs/{run_id}")


def final_state(api: str, run_id: str, timeout: float) -> dict:
    def done():
        run = flow_run(api, run_id)
        return run if run["state_type"] in FINAL else None

    return wait_for(f"flow run {run_id} to finish", done, timeout, every=2)


def shard_runs(api: str) -> dict[int, list[str]]:
    """State of every eval-shard flow run, per shard index, oldest first."""
    runs = call_api(
        "POST",
        f"{api}/flow_runs/filter",
        {"flows": {"name": {"any_": ["eval-shard"]}}, "sort": "EXPECTED_START_TIME_ASC"},
    )
    by_shard: dict[int, list[str]] = {}
    for run in sorted(runs, key=lambda r: r["created"]):
        by_shard.setdefault(run["parameters"]["config"]["shard"]["index"], []).append(
            run["state_type"]
        )
    return by_shard


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


def retry_logged(api: str, run_id: str) -> bool:
    logs = call_api("POST", f"{api}/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}})
    text = "\n".join(entry["message"] for entry in logs)
    return all(
        line in text
        for line in ("shard 1 of 2 failed", "shard 0 of 2 skipped", "shard 1 of 2 done")
    )


def test_eval_run_on_a_work_pool_retried_from_the_ui(tmp_path: Path) -> None:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "2",
        "PREFECT_LOGGING_LEVEL": "INFO",
        "GYMFLOW_CHECKOUT": str(ROOT),
    }
    config = {"benchmark": "arithmetic-smoke", "limit": 12, "out": str(tmp_path / "run")}
    scale = ScaleOptions(
        shards=2,
        work_pool=POOL,
        shard_root=str(tmp_path / "shared"),
        shard_retries=0,  # task retries are tested in test_shards; here each run is a process
        shard_timeout_s=300,
    )
    eval_config = EvalConfig.model_validate(config)
    failing = store_path(shard_dir(eval_config, scale, eval_config.fingerprint(), 1))
    failing.parent.mkdir(parents=True)

    server = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with started(server, env, tmp_path / "server.log"):
        wait_for("the Prefect server", lambda: healthy(api), timeout=180)
        for command in (
            [PREFECT, "work-pool", "create", POOL, "--type", "process"],
            [PREFECT, "--no-prompt", "deploy", "--all"],
        ):
            done = subprocess.run(
                command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, done.stdout + done.stderr
        worker = [PREFECT, "worker", "start", "--pool", POOL]
        with started(worker, env, tmp_path / "worker.log"):
            deployment = call_api("GET", f"{api}/deployments/name/eval-run/eval-run")
            parameters = {"config": config, "scale": scale.model_dump(mode="json")}
            created = call_api(
                "POST",
                f"{api}/deployments/{deployment['id']}/create_flow_run",
                {"parameters": parameters},
            )
            # another process holds shard 1's store, so shard 1 fails
            with locked(failing):
                first = final_state(api, created["id"], timeout=600)
            assert first["state_type"] == "FAILED", first["state"]
            assert "1 of 2 shards failed" in first["state"]["message"]
            assert shard_runs(api) == {0: ["COMPLETED"], 1: ["FAILED"]}

            # the Prefect UI's Retry button
            retried = call_api(
                "POST",
                f"{api}/flow_runs/{created['id']}/set_state",
                {"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}},
            )
            assert retried["status"] == "ACCEPT", retried
            second = final_state(api, created["id"], timeout=600)
            log = (tmp_path / "worker.log").read_text()
            assert second["state_type"] == "COMPLETED", (second["state"], log[-4000:])
            assert second["run_count"] == 2
            shard_runs_after = shard_runs(api)
            assert_artifacts_updated_in_place(api, created["id"])
            wait_for("the retry's log lines", lambda: retry_logged(api, created["id"]), 60)

    # only the failed shard ran again
    assert shard_runs_after == {0: ["COMPLETED"], 1: ["FAILED", "COMPLETED"]}
    con = duckdb.connect(str(store_path(tmp_path / "run")), read_only=True)
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
    assert stored == distinct == expected == 12 * 4
    assert calls == distinct_calls
