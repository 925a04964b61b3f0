"""Untrusted model output, end to end: `gym eval run` on an environment whose policy answers with
hostile programs (loop, 8 GB allocation, 1,000 forks, a write outside its directory, a socket, a
kill of its parent and of `gym` itself, a forged report). Each runs through the same path as a
model's code: the policy server, the collector, HumanEval's resources server and the code_exec
verifier's sandbox. The run completes, each rollout ends as a failed verification with its reason,
the forgery is reported as tampering by `gym eval health`, and the host's file and listening
socket are untouched. (tests/environments/test_sandbox.py attacks the verifier
function directly; this is the run-level version.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.faults.stores import query, run_gym

ENVS = Path(__file__).parent / "envs"  # attacks/
REASONS = {
    "attack-loop": {"timeout"},
    "attack-allocate-8gb": {"memory"},
    "attack-fork-1000": {"process_limit", "timeout", "runtime_error"},
    "attack-write-outside": {"runtime_error", "read_only_filesystem"},
    "attack-socket": {"network"},
    "attack-kill-parent": {"permission_denied", "runtime_error", "killed", "tests_failed"},
    "attack-fake-report": {"tampering"},
}


def test_hostile_programs_fail_verification_and_harm_nothing(tmp_path: Path, prefect_api: str):
    require_tool("bwrap")
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        env = {
            "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS),
            "GYMFLOW_FAULTS_VICTIM": str(victim),
            "GYMFLOW_FAULTS_PORT": str(listener.getsockname()[1]),
        }
        result = run_gym("eval", "run", "--environment", "attacks", "--out", str(tmp_path / "run"),
                         cwd=tmp_path, prefect_api=prefect_api, env=env, timeout=600)  # fmt: skip
        try:
            listener.accept()
            connected = True
        except BlockingIOError:
            connected = False
    assert result.returncode == 0, result.stdout + result.stderr
    assert not connected, "a sandboxed program reached a socket on the host"
    assert victim.read_text() == "original"

    rows = query(
        tmp_path / "run" / "gymflow.duckdb",
        """SELECT r.task_id, r.status, v.status, v.reward, v.passed, v.details_json
           FROM rollouts r LEFT JOIN verifications v USING (rollout_id) ORDER BY r.task_id""",
    )
    assert {row[0] for row in rows} == set(REASONS)
    for task_id, status, v_status, reward, passed, details in rows:
        assert (status, v_status, reward, passed) == ("completed", "ok", 0.0, False), task_id
        assert json.loads(details)["reason"] in REASONS[task_id], (task_id, details)

    # Tampering is evidence a training team sees: health warns with its share of the run.
    health = run_gym("eval", "health", str(tmp_path / "run"), "--json",
                     cwd=tmp_path, prefect_api=prefect_api)  # fmt: skip
    assert health.returncode == 0, health.stdout + health.stderr
    report = json.loads(health.stdout)
    tampered = {row[0] for row in rows if json.loads(row[5])["reason"] == "tampering"}
    assert "tampering" in report["warnings"]
    check = report["checks"]["tampering"]
    assert check["severity"] == "warning"
    assert check["count"] > 0
    assert check["share"] == pytest.approx(check["count"] / report["expected"])
    assert tampered == {"attack-fake-report"}
