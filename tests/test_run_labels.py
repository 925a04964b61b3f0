"""`gym eval run` gives its flow run the run's tags (benchmark, environment, model, harness),
so the Prefect UI filters a terminal's runs as it filters deployment runs."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import gym
from tests.faults.stores import gym_env

TAGS = {
    "model:gymflow-local-policy",
    "benchmark:arithmetic-smoke",
    "environment:arithmetic",
    "harness:single_turn",
}


def test_a_cli_run_carries_its_tags(prefect_api: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("eval", "run", "--benchmark", "arithmetic-smoke", "--limit", "2", "--repeats", "1")
    gym(*args, "--out", str(out), cwd=tmp_path, env=gym_env(prefect_api), check=True)
    runs = httpx.post(
        f"{prefect_api}/flow_runs/filter",
        json={"flow_runs": {"tags": {"all_": sorted(TAGS)}}, "limit": 200},
        timeout=30,
    ).json()
    (ours,) = [r for r in runs if r["parameters"]["config"]["out"] == str(out)]
    assert set(ours["tags"]) >= TAGS, ours["tags"]
