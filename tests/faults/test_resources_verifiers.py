"""A resources server whose tools crash for a while and come back, a verifier that raises and one
that hangs (spinning): each is recorded as what it is, with its reason, and every other rollout is
scored as if nothing had happened, in `gym eval run` and in `gym eval reverify` alike; and nothing
of a hung verification (worker process or thread) outlives it. The environment (envs/faultlab) is
loaded through GYMFLOW_ENVIRONMENTS_PATH, with its verifier registered by its own env.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.cli import exit_codes
from gymflow.environments.registry import load_environment
from gymflow.verifiers import pool
from gymflow.verifiers.base import VerifyInput
from gymflow.verifiers.pool import worker_pool
from tests.faults.stores import query, run_gym

ENVS = Path(__file__).parent / "envs"
TASKS = 40  # envs/faultlab/environment.yaml's split size
OUTAGE = range(8, 18)  # envs/faultlab/env.py: tool calls, counted across the run, that crash
MODES = {3: "raise", 7: "hang"}  # envs/faultlab/env.py: task index % 10 -> verifier behaviour


def _mode(task_id: str) -> str:
    return MODES.get(int(task_id.split("-")[1]) % 10, "ok")


def _processes_with(marker: str) -> list[int]:
    """Live processes (not zombies) whose environment holds `marker` (a `KEY=VALUE`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # exited while we looked, or not ours to read
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def _hung_pids(pid_dir: Path) -> set[int]:
    """Processes in which the faultlab verifier started to hang (envs/faultlab/env.py)."""
    return {int(path.name.split("-")[0]) for path in pid_dir.iterdir()}


def _assert_gone(pids: set[int], marker: str) -> None:
    """None of `pids`, nor any other process started with `marker`, is still alive."""
    alive = _processes_with(marker)
    assert not alive, f"processes of the run still alive: {alive}"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or pid not in _processes_with(marker)


def test_crashing_tools_and_broken_verifiers_are_recorded_not_scored(
    tmp_path: Path, prefect_api: str
) -> None:
    out = tmp_path / "run"
    pid_dir = tmp_path / "hung"
    pid_dir.mkdir()
    marker = f"FAULTLAB_PID_DIR={pid_dir}"
    env = {
        "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS),
        "FAULTLAB_PID_DIR": str(pid_dir),
        "GYMFLOW_CHILD_ENV": "FAULTLAB_PID_DIR",  # the verifier workers read it (`child_env`)
    }
    result = run_gym(
        "eval", "run", "--environment", "faultlab", "--repeats", "2", "--concurrency", "4",
        "--out", str(out), cwd=tmp_path, prefect_api=prefect_api, timeout=600, env=env,
    )  # fmt: skip
    # The run completes; 24 of its 80 rollouts failed (the tool outage), so its gate fails.
    assert result.returncode == exit_codes.GATE_FAILED, result.stdout + result.stderr
    assert "health: unhealthy" in result.stdout
    store = out / "gymflow.duckdb"

    rows = query(
        store,
        """
        SELECT r.task_id, r.status, r.failure_kind, r.error, r.output_text,
               v.status, v.failure_kind, v.reward, v.details_json
        FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
        """,
    )
    assert len(rows) == TASKS * 2

    # The outage: one crashed tool call ends one rollout as a tool failure, never as reward 0.
    crashed = [r for r in rows if r[1] == "failed"]
    assert len(crashed) == len(OUTAGE)
    for _, _, kind, error, _, v_status, *_ in crashed:
        assert kind == "tool_error" and v_status is None
        assert "ConnectionResetError: resources server restarting" in error
    # ... and the server came back: rollouts after it made their calls and were verified.
    tool_rollouts = query(store, "SELECT count(*) FROM rollouts WHERE num_turns > 1")[0][0]
    assert tool_rollouts > len(OUTAGE)

    hung = 0
    for task_id, status, _, _, output, v_status, v_kind, reward, details in rows:
        if status != "completed":
            continue
        details = json.loads(details)
        if _mode(task_id) == "raise":
            assert (v_status, v_kind, reward) == ("error", "verifier_error", None)
            assert details["error"] == "RuntimeError: checker crashed on purpose"
        elif _mode(task_id) == "hang":
            hung += 1
            assert (v_status, v_kind, reward) == ("error", "verifier_timeout", None)
            assert "1s" in details["error"] and "worker process was killed" in details["error"]
        else:
            answer = int(task_id.split("-")[1]) * 7
            assert (v_status, v_kind) == ("ok", None)
            assert reward == (1.0 if output.endswith(f"Answer: {answer}") else 0.0)
    # Every hung verification spun in a worker process of its own, and none survived the run.
    assert hung > 0 and len(_hung_pids(pid_dir)) == hung
    _assert_gone(_hung_pids(pid_dir), marker)

    verify_errors = sum(1 for r in rows if r[1] == "completed" and r[5] == "error")
    assert verify_errors > 0
    coverage = re.search(
        r"coverage: expected (\d+), scored (\d+), failed (\d+), missing (\d+)", result.stdout
    )
    assert coverage, result.stdout
    expected, scored, failed, missing = map(int, coverage.groups())
    assert (expected, missing) == (TASKS * 2, 0)
    assert failed == len(crashed) + verify_errors
    assert scored + failed + missing == expected

    # Reverify the same run with a looser verifier: it finishes, the hung rollouts are timeouts
    # again (in workers that are gone afterwards), and the others get the new verdicts.
    for path in pid_dir.iterdir():
        path.unlink()
    result = run_gym(
        "eval", "reverify", str(out), "--set", "tolerance=1", "--json",
        cwd=tmp_path, prefect_api=prefect_api, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert (summary["status"], summary["reverified"]) == ("written", TASKS * 2 - len(crashed))
    again = query(
        store,
        """
        SELECT r.task_id, r.output_text, v.status, v.failure_kind, v.reward, v.details_json
        FROM rollouts r JOIN verifications v USING (rollout_id)
        WHERE v.verifier_version = ?
        """,
        [summary["new_version"]],
    )
    assert len(again) == TASKS * 2 - len(crashed)
    for task_id, output, v_status, v_kind, reward, details in again:
        if _mode(task_id) == "hang":
            assert (v_status, v_kind, reward) == ("error", "verifier_timeout", None)
            assert "worker process was killed" in json.loads(details)["error"]
        elif _mode(task_id) == "raise":
            assert (v_status, v_kind) == ("error", "verifier_error")
        else:
            answer = int(task_id.split("-")[1]) * 7
            close = output.endswith((f"Answer: {answer}", f"Answer: {answer + 1}"))
            assert (v_status, reward) == ("ok", 1.0 if close else 0.0)
    assert len(_hung_pids(pid_dir)) == hung
    _assert_gone(_hung_pids(pid_dir), marker)


@pytest.fixture
def fresh_pool() -> Iterator[None]:
    """This process's verifier workers are started by the test, so they see its environment
    variables (FAULTLAB_PID_DIR), and stopped after it."""
    worker_pool().shutdown()
    yield
    worker_pool().shutdown()


def test_a_hung_verification_leaves_no_thread_or_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_pool: None
) -> None:
    """In the collector's own process: the hung verification ends as a timeout, and once the
    loop is done no thread waits on it and its worker is gone."""
    pid_dir = tmp_path / "hung"
    pid_dir.mkdir()
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(ENVS))
    monkeypatch.setenv("FAULTLAB_PID_DIR", str(pid_dir))
    monkeypatch.setenv("GYMFLOW_CHILD_ENV", "FAULTLAB_PID_DIR")  # a worker's variable
    env = load_environment("faultlab")
    server = env.resources_server()
    tasks = [t for t in env.tasks("test")[:10] if _mode(t.task_id) in ("ok", "hang")]
    threads_before = set(threading.enumerate())

    async def verify_all():
        sessions = [await server.seed_session(task) for task in tasks]
        return await asyncio.gather(
            *(server.verify(s, t, t.reference, []) for s, t in zip(sessions, tasks, strict=True))
        )

    verdicts = dict(zip((t.task_id for t in tasks), asyncio.run(verify_all()), strict=True))
    assert verdicts["lab-007"].failure_kind == "verifier_timeout"
    others = [v for task_id, v in verdicts.items() if task_id != "lab-007"]
    assert [(v.status, v.reward) for v in others] == [("ok", 1.0)] * len(others)
    assert set(threading.enumerate()) <= threads_before
    (hung_pid,) = _hung_pids(pid_dir)
    assert hung_pid != os.getpid()
    # What is left is the pool's idle workers, kept for the next batch: at most one per core.
    idle = worker_pool().pids()
    assert hung_pid not in idle and len(idle) <= (os.cpu_count() or 1)
    assert sorted(_processes_with(f"FAULTLAB_PID_DIR={pid_dir}")) == sorted(idle)

    # A rollout whose state cannot reach a worker is a verifier error; the worker is kept.
    refused = server.verify_bounded(VerifyInput(tasks[0], "", [], {"lock": threading.Lock()}))
    assert (refused.status, refused.failure_kind) == ("error", "verifier_error")
    assert "cannot send the rollout" in refused.details["error"]
    assert sorted(worker_pool().pids()) == sorted(idle)


def test_a_cancelled_rollout_kills_its_hung_verifier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_pool: None
) -> None:
    """A collector cancelled mid-verification (Ctrl-C, a cancelled flow) does not wait out the
    verifier's bound to exit: the worker is killed when its rollout is cancelled."""
    pid_dir = tmp_path / "hung"
    pid_dir.mkdir()
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(ENVS))
    monkeypatch.setenv("FAULTLAB_PID_DIR", str(pid_dir))
    monkeypatch.setenv("GYMFLOW_CHILD_ENV", "FAULTLAB_PID_DIR")  # a worker's variable
    env = load_environment("faultlab")
    # A bound far beyond the test: only cancellation can end this verification in time.
    server = env.resources_server()
    server.verifier = dataclasses.replace(server.verifier, timeout_s=120.0)
    task = env.tasks("test")[7]
    assert _mode(task.task_id) == "hang"
    endings: list[str] = []
    real_run = pool.VerifierPool.run

    def recording_run(self, *args, **kwargs):
        try:
            return real_run(self, *args, **kwargs)
        except Exception as exc:
            endings.append(type(exc).__name__)
            raise

    monkeypatch.setattr(pool.VerifierPool, "run", recording_run)

    async def cancel_once_hung():
        session = await server.seed_session(task)
        verifying = asyncio.create_task(server.verify(session, task, task.reference, []))
        for _ in range(1200):  # until the verifier spins in its worker (at most a minute)
            if any(pid_dir.iterdir()) or verifying.done():
                break
            await asyncio.sleep(0.05)
        assert not verifying.done() and any(pid_dir.iterdir())
        verifying.cancel()
        with pytest.raises(asyncio.CancelledError):
            await verifying

    asyncio.run(cancel_once_hung())  # returns once the loop's executor threads are done
    assert endings == ["Abandoned"]
    (hung_pid,) = _hung_pids(pid_dir)
    assert hung_pid not in _processes_with(f"FAULTLAB_PID_DIR={pid_dir}")
