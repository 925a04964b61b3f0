"""A resources server whose tools crash for a while and come back, a verifier that raises and one
that hangs: each is recorded as what it is, with its reason, and every other rollout is scored as
if nothing had happened. The environment (envs/faultlab) is loaded through
GYMFLOW_ENVIRONMENTS_PATH, with its verifier registered by its own env.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.faults.stores import query, run_gym

ENVS = Path(__file__).parent / "envs"
TASKS = 40  # envs/faultlab/environment.yaml's split size
OUTAGE = range(8, 18)  # envs/faultlab/env.py: tool calls, counted across the run, that crash


def test_crashing_tools_and_broken_verifiers_are_recorded_not_scored(
    tmp_path: Path, prefect_api: str
) -> None:
    out = tmp_path / "run"
    result = run_gym(
        "eval", "run", "--environment", "faultlab", "--repeats", "2", "--concurrency", "4",
        "--out", str(out), cwd=tmp_path, prefect_api=prefect_api, timeout=600,
        env={"GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
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

    mode = {3: "raise", 7: "hang"}
    for task_id, status, _, _, output, v_status, v_kind, reward, details in rows:
        if status != "completed":
            continue
        expected_mode = mode.get(int(task_id.split("-")[1]) % 10, "ok")
        details = json.loads(details)
        if expected_mode == "raise":
            assert (v_status, v_kind, reward) == ("error", "verifier_error", None)
            assert details["error"] == "RuntimeError: checker crashed on purpose"
        elif expected_mode == "hang":
            assert (v_status, v_kind, reward) == ("error", "verifier_timeout", None)
            assert "1s" in details["error"]
        else:
            answer = int(task_id.split("-")[1]) * 7
            assert (v_status, v_kind) == ("ok", None)
            assert reward == (1.0 if output.endswith(f"Answer: {answer}") else 0.0)

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
