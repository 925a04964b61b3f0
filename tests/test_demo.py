"""`gym demo` end to end, as a new user runs it, and `gym eval profile --json` on its store."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym

# `gym demo` runs its flow on Prefect's ephemeral server
pytestmark = pytest.mark.prefect


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`gym demo` with no Prefect server configured: the suite's one run that starts its own
    (ephemeral) server, as a new user's first run does."""
    cwd = tmp_path_factory.mktemp("demo")
    result = gym("demo", cwd=cwd, check=True)
    return cwd, result.stdout


def test_demo_stores_every_rollout(demo_run: tuple[Path, str]) -> None:
    cwd, _ = demo_run
    store = cwd / "runs" / "demo" / "gymflow.duckdb"
    con = duckdb.connect(str(store), read_only=True)
    tasks, repeats = con.execute(
        "SELECT count(*), (SELECT max(repeats) FROM runs) FROM tasks"
    ).fetchone()
    assert (tasks, repeats) == (50, 4)
    assert con.execute("SELECT count(*) FROM rollouts").fetchone()[0] == 200
    distinct = con.execute(
        "SELECT count(DISTINCT (task_id, repeat_index)) FROM rollouts"
    ).fetchone()
    assert distinct[0] == 200
    assert con.execute("SELECT count(*) FROM model_calls").fetchone()[0] >= 200
    models = con.execute(
        "SELECT DISTINCT response_json::JSON->>'model' FROM model_calls"
    ).fetchall()
    assert models == [("gymflow-simulated-policy",)]


def test_demo_prints_headline_and_report_matches(demo_run: tuple[Path, str]) -> None:
    cwd, stdout = demo_run
    match = re.search(r"pass@1 = ([\d.]+)%\s+\(95% CI ([\d.]+)% – ([\d.]+)%\)", stdout)
    assert match, stdout
    pass1, low, high = match.groups()
    for k in (1, 2, 3, 4):
        assert re.search(rf"│ {k} │ [\d.]+%", stdout), f"pass@{k} row missing:\n{stdout}"
    assert "coverage: expected 200, scored 200, failed 0, missing 0" in stdout
    # the terminal says the answers were simulated, and which verifier version it reads
    assert "SIMULATED: gymflow's simulated policy server answered this run" in stdout
    assert re.search(r"verifier version: \S+", stdout), stdout
    report_path = Path(re.search(r"report: (\S+)", stdout).group(1))
    assert report_path.exists()
    html = report_path.read_text()
    for number in (pass1, low, high):
        assert f"{number}%" in html

    profile = json.loads(gym("eval", "profile", "runs/demo", "--json", cwd=cwd, check=True).stdout)
    assert f"{100 * profile['pass@1']:.1f}" == pass1
    assert [f"{100 * x:.1f}" for x in profile["ci95"]] == [low, high]
    assert set(profile["pass@k"]) == {"1", "2", "3", "4"}
    assert profile["coverage"] == {"expected": 200, "scored": 200, "failed": 0, "missing": 0}
    assert profile["stderr"] > 0
    # pass@k never decreases with k, and pass@1 lies inside its CI
    values = [profile["pass@k"][k] for k in "1234"]
    assert values == sorted(values)
    assert profile["ci95"][0] < profile["pass@1"] < profile["ci95"][1]


def test_demo_rerun_resumes_without_new_rollouts(
    demo_run: tuple[Path, str], prefect_api: str
) -> None:
    cwd, first = demo_run
    # on the suite's server: the first run already proved the ephemeral one
    again = gym("demo", cwd=cwd, env={"PREFECT_API_URL": prefect_api}, check=True).stdout
    pick = re.compile(r"pass@1 = .*")
    assert pick.search(again).group(0) == pick.search(first).group(0)
