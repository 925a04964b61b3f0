"""A study whose arms differ only in the harness, on the shipped workspace tasks with the same
(simulated) model: paired by task, and read as harness evidence by the study, by
`gym eval profile --compare`, and the decision: the tasks one harness solves and the other does
not are harness work, with the failing rollouts as evidence.

The model is gymflow's simulated policy: under `tool_loop` it calls the `shell` tool with the
task's solve.sh on the tasks it "solves" and with `ls -la` on the others, so the whole chain runs
(model server, tool loop, sandbox, test script), and the `nothing` agent solves no task."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym, require_tool

pytestmark = pytest.mark.slow

STUDY = """
name: harness-comparison
out: runs/study
baseline:
  benchmark: workspace-basics
  harness: {name: command, agent: tool_loop, max_turns: 4}
  concurrency: 2
variants:
  - name: nothing
    set: {harness: {agent: nothing}}
"""


def test_a_harness_study_reads_as_harness_evidence(tmp_path: Path, prefect_api: str) -> None:
    require_tool("bwrap")
    (tmp_path / "study.yaml").write_text(STUDY)
    env = {"PREFECT_API_URL": prefect_api}
    ran = gym("study", "run", "study.yaml", cwd=tmp_path, timeout=900, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "nothing: harness work: with the same model," in ran.stdout.replace("\n", " ")

    baseline, variant = tmp_path / "runs/study/baseline", tmp_path / "runs/study/nothing"
    profiled = gym("eval", "profile", str(baseline), "--compare", str(variant), "--json",
                   cwd=tmp_path, env=env, check=True)  # fmt: skip
    evidence = json.loads(profiled.stdout)["harness"]
    assert evidence["decision"].startswith("harness work")
    assert "harness.agent=tool_loop" in evidence["harness_a"]
    assert "harness.agent=nothing" in evidence["harness_b"]
    assert evidence["b_only"] == []
    con = duckdb.connect(str(baseline / "gymflow.duckdb"), read_only=True)
    solved = {row[0] for row in con.execute(
        "SELECT task_id FROM rollouts JOIN verifications USING (rollout_id) WHERE passed"
    ).fetchall()}  # fmt: skip
    assert solved, "the simulated policy solves some tasks through the tool loop"
    gaps = {gap["task_id"]: gap for gap in evidence["a_only"]}
    assert set(gaps) == solved  # nothing solves none: every task tool_loop solved is a gap
    nothing = duckdb.connect(str(variant / "gymflow.duckdb"), read_only=True)
    for gap in gaps.values():
        (failing,) = gap["failing"]
        row = nothing.execute(
            "SELECT task_id, passed FROM rollouts JOIN verifications USING (rollout_id) "
            "WHERE rollout_id = ?",
            [failing["rollout_id"]],
        ).fetchone()
        assert row == (gap["task_id"], False)  # the evidence is the other harness's failure
