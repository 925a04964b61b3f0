"""`gym server --crash-silent-runs`: the automation that marks a flow run Crashed when its
worker's heartbeats stop (a dead host), created once on the team's server."""

from __future__ import annotations

import httpx

from tests.conftest import gym


def test_the_automation_marking_silent_runs_crashed_is_made_once(prefect_api, tmp_path):
    env = {"PREFECT_API_URL": prefect_api}
    first = gym("server", "--crash-silent-runs", cwd=tmp_path, env=env, check=True)
    assert "created" in first.stdout
    again = gym("server", "--crash-silent-runs", cwd=tmp_path, env=env, check=True)
    assert "exists already" in again.stdout
    found = httpx.post(f"{prefect_api}/automations/filter", json={}, timeout=10).json()
    ours = [a for a in found if a["name"] == "gymflow: crash silent flow runs"]
    assert len(ours) == 1
    trigger, action = ours[0]["trigger"], ours[0]["actions"][0]
    assert trigger["posture"] == "Proactive" and trigger["within"] == 90
    assert trigger["after"] == ["prefect.flow-run.heartbeat"]
    assert action["type"] == "change-flow-run-state" and action["state"] == "CRASHED"


def test_without_a_server_it_says_what_it_needs(tmp_path):
    refused = gym("server", "--crash-silent-runs", cwd=tmp_path, env={"PREFECT_API_URL": ""})
    assert refused.returncode == 1
    assert "needs the team's Prefect server" in refused.stderr
