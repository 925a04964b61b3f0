"""NeMo Gym rollout files: import (rows written here in its format), health/profile/reverify on
the imported run, bad rows refused with file, line and field, and export back out."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from gymflow.analysis.diagnose import diagnose
from gymflow.analysis.health import health
from gymflow.analysis.profile import profile
from gymflow.builtin.arithmetic.env import make_task
from gymflow.interop.export import export_run
from gymflow.interop.nemo_gym import import_rollouts
from gymflow.models.responses import output_text
from gymflow.store.db import connect
from tests.conftest import gym_in_process as gym  # import, export and reads: no process needed

TASKS = [make_task(i) for i in range(5)]


def _row(task_index: int, rollout_index: int, text: str, reward: float, **extra) -> dict:
    task = TASKS[task_index]
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": task.data["question"]}],
            "temperature": 1.0,
            "top_p": 1.0,
            "max_output_tokens": 512,
        },
        "response": {
            "id": f"resp_{task_index}_{rollout_index}",
            "object": "response",
            "model": "nemo-policy",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
            ],
            "usage": {"input_tokens": 40, "output_tokens": 9, "total_tokens": 49},
        },
        "reward": reward,
        "_ng_task_index": task_index,
        "_ng_rollout_index": rollout_index,
        "task_id": task.task_id,
        "expected_answer": task.data["answer"],
        **extra,
    }


def _rows() -> list[dict]:
    rows = []
    for i, task in enumerate(TASKS):
        answer = task.data["answer"]
        rows.append(_row(i, 0, f"Answer: {answer}", 1.0))
        # NeMo Gym's own verifier was lenient here: reward 1 without an 'Answer:' line
        rows.append(_row(i, 1, f"I get {answer}." if i % 2 else f"Answer: {answer + 1}", i % 2))
    return rows


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("nemo")
    _write(cwd / "rollouts.jsonl", _rows())
    gym(
        "import",
        "nemo-gym",
        "rollouts.jsonl",
        "--out",
        "run",
        "--environment",
        "arithmetic",
        cwd=cwd,
        check=True,
    )
    return cwd


def _query(store: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_import_stores_rows_tasks_and_rewards(imported: Path) -> None:
    store = imported / "run" / "gymflow.duckdb"
    assert _query(store, "SELECT count(*) FROM tasks")[0][0] == 5
    assert _query(store, "SELECT count(*), sum(num_model_calls) FROM rollouts")[0] == (10, 10)
    rewards = dict(
        _query(
            store,
            "SELECT r.task_id || '#' || r.repeat_index, v.reward FROM rollouts r "
            "JOIN verifications v USING (rollout_id) WHERE v.verifier_version = 'imported'",
        )
    )
    for row in _rows():
        key = f"{row['task_id']}#{row['_ng_rollout_index']}"
        assert rewards[key] == row["reward"]
    data = dict(_query(store, "SELECT task_id, data_json FROM tasks"))
    assert json.loads(data["arith-00003"]) == TASKS[3].data  # the environment's task data
    run = _query(store, "SELECT model, repeats, environment, sampling_json FROM runs")[0]
    assert run[:3] == ("nemo-policy", 2, "arithmetic")
    assert json.loads(run[3]) == {"temperature": 1.0, "top_p": 1.0, "max_output_tokens": 512}


def test_every_stage_runs_on_the_imported_run(imported: Path) -> None:
    con = connect(imported / "run", read_only=True)
    try:
        checked, profiled = health(con).as_json(), profile(con).as_json()
    finally:
        con.close()
    assert checked["verdict"] == "healthy", checked["failing_checks"]
    assert profiled["verifier_version"] == "imported"
    assert profiled["pass@1"] == pytest.approx((5 + 2) / 10)
    out = gym(
        "eval",
        "reverify",
        "run",
        "--set",
        "extract=answer_line",
        "--make-current",
        "--json",
        cwd=imported,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["base_version"] == "imported"
    assert result["current_version"] == result["new_version"]
    # gymflow's strict answer_line check fails the two lenient 'I get N.' rows NeMo Gym passed
    assert len(result["flips"]["rollouts"]["to_fail"]) == 2
    assert result["flips"]["rollouts"]["to_pass"] == []
    assert result["after"]["pass@1"] == pytest.approx(5 / 10)
    con = connect(imported / "run", read_only=True)
    try:
        diagnosis = diagnose(con).as_json()
    finally:
        con.close()
    assert diagnosis["verifier_version"] == result["new_version"]
    assert any(s["kind"].startswith("versions_disagree") for s in diagnosis["verifier_suspects"])


def test_bad_rows_name_file_line_and_field(tmp_path: Path) -> None:
    rows = _rows()[:4]
    broken = dict(rows[1])
    del broken["reward"]
    wrong_type = dict(rows[2], reward="1.0")
    _write(tmp_path / "bad.jsonl", [rows[0], broken, "{not json", wrong_type, rows[3]])
    out = gym("import", "nemo-gym", "bad.jsonl", "--out", "run", cwd=tmp_path)
    assert out.returncode == 1
    message = " ".join(out.stderr.split())
    for expected in (
        "bad.jsonl:2: reward: missing",
        "bad.jsonl:3: not JSON",
        'bad.jsonl:4: reward: expected a number, got "1.0"',
        "nothing imported",
    ):
        assert expected in message, message
    assert not (tmp_path / "run" / "gymflow.duckdb").exists()
    unknown = dict(rows[0], task_id="arith-99999")
    _write(tmp_path / "unknown.jsonl", [unknown])
    out = gym(
        "import",
        "nemo-gym",
        "unknown.jsonl",
        "--out",
        "run",
        "--environment",
        "arithmetic",
        cwd=tmp_path,
    )
    assert out.returncode == 1
    assert "unknown.jsonl:1: task_id: 'arith-99999' is not a task of environment" in " ".join(
        out.stderr.split()
    )
    assert not (tmp_path / "run" / "gymflow.duckdb").exists()


def test_export_round_trip_and_flat_formats(imported: Path) -> None:
    gym(
        "export",
        "run",
        "--format",
        "nemo-gym",
        "--verifier-version",
        "imported",
        "--out",
        "again.jsonl",
        cwd=imported,
        check=True,
    )
    lines = [json.loads(line) for line in (imported / "again.jsonl").read_text().splitlines()]
    original = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in _rows()}
    assert len(lines) == 10
    for line in lines:
        source = original[(line["_ng_task_index"], line["_ng_rollout_index"])]
        assert line["reward"] == source["reward"]
        assert output_text(line["response"]["output"]) == output_text(source["response"]["output"])
        params = source["responses_create_params"]
        assert {k: line["responses_create_params"][k] for k in params} == params
        assert line["task_id"] == source["task_id"]
        # the task's fields sit under `task`, so NeMo Gym's profiling does not average them
        assert line["task"]["answer"] == TASKS[line["_ng_task_index"]].data["answer"]
        assert "answer" not in line
    import_rollouts(imported / "again.jsonl", imported / "reimported")
    rewards = _query(
        imported / "reimported" / "gymflow.duckdb",
        "SELECT sum(reward) FROM verifications",
    )
    assert rewards[0][0] == sum(r["reward"] for r in _rows())
    export_run(imported / "run", "parquet", out=imported / "r.parquet")
    export_run(imported / "run", "jsonl", out=imported / "r.jsonl")
    count = duckdb.sql(f"SELECT count(*) FROM '{imported / 'r.parquet'}'").fetchall()[0][0]
    assert count == 10
    flat = [json.loads(x) for x in (imported / "r.jsonl").read_text().splitlines()]
    assert len(flat) == 10 and {"rollout_id", "reward", "trajectory"} <= set(flat[0])
