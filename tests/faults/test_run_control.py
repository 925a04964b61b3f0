"""Run control, as an operator meets it: SIGTERM (systemd, Kubernetes, `docker stop`) and a
cancellation in Prefect stop a run the way Ctrl-C does (what finished is committed, nothing in
flight is recorded, the exit code says why) and `--resume` completes it; a model server that dies
stops the run early with one line; a resume re-runs the rollouts that failed for a transient
reason, keeping the failed attempts as evidence (`--no-retry-failed` leaves them); and a run in
which more than 5% of the rollouts failed fails its health gate and is never called healthy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx

from gymflow.cli import exit_codes
from tests.conftest import GYM, free_port
from tests.faults.stores import gym_env, one_error_line, orphans, query, run_gym

# 1000 rollouts paced by the model's latency (4 x 50 ms: 12 s at the least): a stop at the first
# progress line, and a Prefect cancel (noticed within its 2 s poll), land far from the end.
SLOW = """\
benchmark: arithmetic-smoke
repeats: 20
concurrency: 4
model:
  faults:
    latency_ms: 50
out: {out}
"""
EXPECTED = 50 * 20


class Running:
    """`gym ARGS` in the background, its stdout read as it comes (progress lines)."""

    def __init__(
        self, args: list[str], cwd: Path, prefect_api: str, env: dict[str, str] | None = None
    ) -> None:
        """`env`: the whole environment, instead of this process's pointed at `prefect_api`."""
        self.process = subprocess.Popen(
            [GYM, *args],
            cwd=cwd,
            env=env or {**os.environ, "COLUMNS": "200", **gym_env(prefect_api)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.collecting = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("rollouts: ") and not line.startswith("rollouts: 0/"):
                self.collecting.set()

    def wait_collecting(self) -> None:
        assert self.collecting.wait(timeout=180), "".join(self.lines)

    def finish(self) -> tuple[int, str, str]:
        code = self.process.wait(timeout=180)
        self.reader.join(timeout=10)
        return code, "".join(self.lines), self.process.stderr.read()


def _stored(store: Path) -> int:
    return query(store, "SELECT count(*) FROM rollouts")[0][0]


def _cancel_flow_run_of(out: Path, prefect_api: str) -> str:
    """Cancel the running `eval-run` flow run writing to `out`, as the UI's Cancel does."""
    running = httpx.post(
        f"{prefect_api}/flow_runs/filter",
        json={"flow_runs": {"state": {"type": {"any_": ["RUNNING"]}}}},
        timeout=30,
    ).json()
    ours = [r for r in running if r["parameters"]["config"]["out"] == str(out)]
    assert len(ours) == 1, [r["name"] for r in running]
    answer = httpx.post(
        f"{prefect_api}/flow_runs/{ours[0]['id']}/set_state",
        json={"state": {"type": "CANCELLING", "message": "test"}, "force": True},
        timeout=30,
    )
    assert answer.is_success, answer.text
    return ours[0]["id"]


def _flow_run_state(flow_run_id: str, prefect_api: str) -> str:
    return httpx.get(f"{prefect_api}/flow_runs/{flow_run_id}", timeout=30).json()["state"]["type"]


def test_sigterm_and_a_prefect_cancel_stop_a_run_that_resume_completes(
    tmp_path: Path, prefect_api: str
):
    out = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(SLOW.format(out=out))
    store = out / "gymflow.duckdb"

    # SIGTERM mid-collection: stops like Ctrl-C, exit 143, one line naming how to continue.
    run = Running(["eval", "run", str(config)], tmp_path, prefect_api)
    run.wait_collecting()
    run.process.send_signal(signal.SIGTERM)
    code, _, stderr = run.finish()
    assert code == exit_codes.TERMINATED == 143, stderr
    line = one_error_line(stderr)
    assert "stopped by SIGTERM" in line and "--resume" in line, line
    after_term = _stored(store)
    assert 0 < after_term < EXPECTED and f"holds {after_term} of {EXPECTED}" in line
    assert orphans(store) == 0

    # A cancellation in Prefect (the UI's Cancel) stops the resumed run the same way, and the
    # flow run ends Cancelled, not Failed or Crashed.
    resumed = Running(["eval", "run", str(config), "--resume"], tmp_path, prefect_api)
    resumed.wait_collecting()
    flow_run_id = _cancel_flow_run_of(out, prefect_api)
    code, _, stderr = resumed.finish()
    assert code == exit_codes.TERMINATED, stderr
    assert "was cancelled in Prefect" in one_error_line(stderr)
    assert _flow_run_state(flow_run_id, prefect_api) == "CANCELLED"
    after_cancel = _stored(store)
    assert after_term < after_cancel < EXPECTED
    assert orphans(store) == 0

    final = run_gym("eval", "run", str(config), "--resume", cwd=tmp_path,
                    prefect_api=prefect_api, check=True)  # fmt: skip
    assert "missing 0" in final.stdout and "health: healthy" in final.stdout
    assert query(store, "SELECT count(DISTINCT (task_id, repeat_index)), count(*) FROM rollouts")[
        0
    ] == (EXPECTED, EXPECTED)
    assert query(store, "SELECT count(*) FROM superseded_rollouts") == [(0,)]


#: Each answer 10 ms late, so a run is still collecting when the test stops it.
LATE = ("--latency-ms", "10")


class ModelServer:
    """`gym serve model` on a fixed port: started, killed and started again by the test."""

    def __init__(self, port: int, cwd: Path) -> None:
        self.port, self.cwd = port, cwd
        self.process: subprocess.Popen | None = None

    def start(self, *options: str) -> None:
        """Serve arithmetic-smoke with `gym serve model`'s `options`, in place of any served."""
        self.stop()
        args = ["serve", "model", "--port", str(self.port), "--benchmark", "arithmetic-smoke"]
        self.process = subprocess.Popen(
            [GYM, *args, *options],
            cwd=self.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).is_success:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("gym serve model did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            self.process = None


def test_a_dead_server_stops_the_run_and_resume_retries_what_failed(
    tmp_path: Path, prefect_api: str
):
    port = free_port()
    out = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(
        f"""\
benchmark: arithmetic-smoke
repeats: 20
concurrency: 4
stop_after_transport_failures: 6
model: {{kind: responses, base_url: "http://127.0.0.1:{port}/v1", name: local-policy,
         max_retries: 1, backoff_s: 0.05}}
out: {out}
"""
    )
    store = out / "gymflow.duckdb"
    server = ModelServer(port, tmp_path)
    server.start(*LATE)
    try:
        # The server dies mid-run: the run stops early (not 18 minutes of retries), exit 3.
        run = Running(["eval", "run", str(config)], tmp_path, prefect_api)
        run.wait_collecting()
        server.stop()
        code, _, stderr = run.finish()
        assert code == exit_codes.RUNTIME, stderr
        line = one_error_line(stderr)
        assert f"model server http://127.0.0.1:{port}/v1 is unreachable" in line, line
        assert "6 rollouts in a row" in line and "--resume" in line
        transport = query(
            store, "SELECT count(*) FROM rollouts WHERE failure_kind = 'transport_error'"
        )[0][0]
        assert transport >= 6 and _stored(store) < 1000
        assert orphans(store) == 0

        # Back, but answering 500 half the time: `--no-retry-failed` leaves the transport
        # failures as they are; more than 5% of the run fails, so the gate fails (exit 2) and
        # nothing calls the run healthy: not the CLI, the report or `gym eval health`.
        server.start(*LATE, "--fault", "500=0.5")
        flaky = run_gym("eval", "run", str(config), "--resume", "--no-retry-failed",
                        cwd=tmp_path, prefect_api=prefect_api)  # fmt: skip
        assert flaky.returncode == exit_codes.GATE_FAILED, flaky.stdout + flaky.stderr
        assert "health: unhealthy" in flaky.stdout and "health: healthy" not in flaky.stdout
        assert "failed_share" in flaky.stdout + flaky.stderr
        assert query(
            store, "SELECT count(*) FROM rollouts WHERE failure_kind = 'transport_error'"
        ) == [(transport,)]
        assert query(store, "SELECT count(*) FROM superseded_rollouts") == [(0,)]
        failed = query(store, "SELECT count(*) FROM rollouts WHERE status = 'failed'")[0][0]
        assert failed > 50
        report = (out / "report.html").read_text()
        assert "unhealthy" in report
        health = run_gym("eval", "health", str(out), "--json", cwd=tmp_path,
                         prefect_api=prefect_api)  # fmt: skip
        assert health.returncode == exit_codes.GATE_FAILED
        verdict = json.loads(health.stdout)
        assert verdict["verdict"] == "unhealthy" and "failed_share" in verdict["gate_failures"]
        server.stop()

        # Healthy again: a plain `--resume` re-runs every transiently failed rollout; the
        # failed attempts stay as evidence, beside (not among) the live rollouts.
        server.start(*LATE)
        final = run_gym("eval", "run", str(config), "--resume", cwd=tmp_path,
                        prefect_api=prefect_api)  # fmt: skip
        assert final.returncode == exit_codes.OK, final.stdout + final.stderr
        assert "failed 0, missing 0" in final.stdout and "health: healthy" in final.stdout
        assert query(store, "SELECT status, count(*) FROM rollouts GROUP BY ALL") == [
            ("completed", 1000)
        ]
        kept = dict(
            query(store, "SELECT failure_kind, count(*) FROM superseded_rollouts GROUP BY ALL")
        )
        assert kept["transport_error"] == transport and sum(kept.values()) == failed
        assert query(store, "SELECT DISTINCT rollout_attempt FROM superseded_rollouts") == [(1,)]
        assert query(
            store,
            "SELECT count(*) FROM superseded_model_calls s ANTI JOIN superseded_rollouts r "
            "USING (rollout_id)",
        ) == [(0,)]
        health = run_gym("eval", "health", str(out), "--json", cwd=tmp_path,
                         prefect_api=prefect_api, check=True)  # fmt: skip
        healthy = json.loads(health.stdout)
        assert healthy["checks"]["duplicate_identity"]["count"] == 0
        assert healthy["verdict"] == "healthy"
    finally:
        server.stop()
