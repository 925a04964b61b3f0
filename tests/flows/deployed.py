"""The team setup for real, shared by the work-pool and Prefect-UI tests: a `prefect server` (with
its UI), `gym serve reports`, the work pool prefect.yaml names, `prefect deploy --all` and a process
worker, started once for the session and stopped at its end. Every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import GYM, PREFECT, ROOT, free_port
from tests.servers import as_a_new_job

POOL = "gymflow-process"  # the work pool prefect.yaml names
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
        # as a new job: a process worker stops on SIGTERM by sending itself SIGINT, which this
        # worker of the suite would otherwise pass on ignored, and `stop` then waited 20 s for a
        # second signal (measured: 20 s, then killed; 1.3 s with SIGINT at its default)
        process = subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=as_a_new_job,
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


@dataclass(frozen=True)
class Deployment:
    api: str  # the Prefect API URL
    ui: str  # the Prefect UI's URL
    reports_url: str  # `gym serve reports`, which serves `served`
    served: Path  # GYMFLOW_REPORTS_ROOT: runs written under it have a served report
    logs: Path  # server.log, reports.log, worker.log


@contextmanager
def deployed(tmp: Path) -> Iterator[Deployment]:
    """Server, reports server, work pool, deployments and worker, as a team sets them up."""
    port, reports_port = free_port(), free_port()
    api = f"http://127.0.0.1:{port}/api"
    reports_url = f"http://127.0.0.1:{reports_port}"
    served = tmp / "served"
    served.mkdir()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "2",
        "PREFECT_LOGGING_LEVEL": "INFO",
        "GYMFLOW_CHECKOUT": str(ROOT),
        "GYMFLOW_REPORTS_URL": reports_url,
        "GYMFLOW_REPORTS_ROOT": str(served),
    }
    server = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    reports = [GYM, "serve", "reports", "--root", str(served), "--port", str(reports_port)]
    with ExitStack() as stack:
        stack.enter_context(started(server, env, tmp / "server.log"))
        stack.enter_context(started(reports, env, tmp / "reports.log"))
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
        stack.enter_context(started(worker, env, tmp / "worker.log"))
        yield Deployment(api, f"http://127.0.0.1:{port}", reports_url, served, tmp)
