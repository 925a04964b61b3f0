"""NeMo Gym's own expectations applied to gymflow (issue 44): the example rollouts NeMo Gym
recorded for a server, replayed through gymflow's NeMo Gym resources (`bench/nemo_gym_replay.py`:
the row's session seeded, each recorded tool call replayed, then `/verify` with the recorded
response), give back the rewards NeMo Gym recorded. Nine servers of the 33 that replay equal,
one of each kind: a single-turn grid answer (arc_agi), a tool loop on session state
(example_multi_step), a counter seeded per session, so each rollout must be a session of its
own (example_session_state_mgmt), tools served over MCP (example_mcp_weather), a click on an
image (circle_click), rewards above 1 (example_tool_call_multireward, 2.0), rows that ask the
same words of different images (circle_count: each recorded line must find its own row),
recorded lines no shipped row asks, replayed with their own fields (gpqa_diamond), and
function calls compared with expected ones (xlam_fc). None needs requirements beyond NeMo
Gym. The whole table is in bench/RESULTS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
VENV = Path(os.environ.get("GYMFLOW_NEMO_GYM_VENV", "/tmp/nemo-gym-venv"))
SERVERS = [
    "arc_agi",
    "circle_click",
    "circle_count",
    "example_mcp_weather",
    "example_multi_step",
    "example_session_state_mgmt",
    "example_tool_call_multireward",
    "gpqa_diamond",
    "xlam_fc",
]


# NeMo Gym's servers from its own venv: a third-party server of the slow tier
@pytest.mark.slow
def test_recorded_rewards_come_back_through_gymflow(tmp_path: Path) -> None:
    if not (VENV / "bin" / "python").exists():
        if os.environ.get("CI"):
            pytest.fail(f"{VENV} missing: .ci/run installs nemo-gym==0.4.0 there")
        pytest.skip(f"no NeMo Gym venv at {VENV}")
    site = next(VENV.glob("lib/python3*/site-packages"))
    env = {**os.environ, "GYMFLOW_NEMO_GYM_VENV": str(VENV), "GYMFLOW_NEMO_GYM_PATH": str(site)}
    done = subprocess.run(
        [sys.executable, str(BENCH / "nemo_gym_replay.py"), "--only", *SERVERS,
         "--per-server", "5", "--parallel", "2", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    by_server = {r["server"].removeprefix("ng-").split("-")[0]: r for r in report["servers"]}
    assert sorted(by_server) == SERVERS, by_server.keys()
    for result in by_server.values():
        assert "refused" not in result, result
        assert (result["replayed"], result["equal"]) == (5, 5), result
    assert report["summary"]["rollouts_equal"] == 5 * len(SERVERS)
