"""Real NeMo Gym rollout files (tests/interop/data, copied from the nemo-gym 0.4.0 wheel) import,
each as what it is: tasks grouped by content when the file has no indices, either usage style,
duplicates kept for health, the materialized-inputs sidecar, multi-turn and aviary call counts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from gymflow.analysis.health import health
from gymflow.interop.nemo_gym import import_rollouts
from gymflow.store.db import connect
from tests.conftest import gym_in_process as gym  # imports and reads: no process needed

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("*/example_rollouts.jsonl"))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _query(run: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _health(run: Path) -> dict:
    con = connect(run, read_only=True)
    try:
        return health(con).as_json()
    finally:
        con.close()


def _final_output(line: dict) -> list[dict]:
    """A line's output items: the last conversation's, when it holds one per model call."""
    response = line["response"]
    return response["output"][-1] if response.get("contains_transitions") else response["output"]


def test_the_fixtures_are_the_files_the_readme_lists() -> None:
    readme = (DATA / "README.md").read_text()
    assert len(FILES) == 7
    for path in FILES:
        assert f"`{path.parent.name}/`" in readme


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)
def test_every_real_file_imports_every_line(path: Path, tmp_path: Path) -> None:
    lines = _lines(path)
    result = import_rollouts(path, tmp_path / "run")
    assert result["rollouts"] == len(lines)
    stored = _query(tmp_path / "run", "SELECT count(*), count(DISTINCT task_id) FROM rollouts")[0]
    assert stored[0] == len(lines)
    rewards = _query(
        tmp_path / "run", "SELECT sum(reward) FROM verifications WHERE verifier_version='imported'"
    )[0][0]
    # a response holding no message or tool call is no answer: not scored (gymnasium's five)
    answered = [line for line in lines if any(
        item.get("type") in ("message", "function_call") for item in _final_output(line)
    )]  # fmt: skip
    assert (rewards or 0.0) == pytest.approx(sum(line["reward"] for line in answered))
    if all("_ng_task_index" in line for line in lines):
        assert result["tasks"] == len({line["_ng_task_index"] for line in lines})


def test_without_indices_rows_group_by_task_content_in_file_order(tmp_path: Path) -> None:
    # gymnasium: five rows with one identical request and no id field are one task's repeats
    result = import_rollouts(DATA / "gymnasium" / "example_rollouts.jsonl", tmp_path / "g")
    assert (result["tasks"], result["rollouts"], result["repeats"]) == (1, 5, 5)
    assert _query(tmp_path / "g", "SELECT list(repeat_index ORDER BY repeat_index) FROM rollouts")[
        0
    ][0] == [0, 1, 2, 3, 4]
    # no usage in the file: token counts stay unknown, never 0
    assert _query(tmp_path / "g", "SELECT count(input_tokens) FROM rollouts")[0][0] == 0
    # each response's output is empty: NeMo Gym scored 0.0, but there is no answer to score
    assert _query(tmp_path / "g", "SELECT DISTINCT status, failure_kind, error FROM rollouts") == [
        ("failed", "response_not_run",
         "the response did not run: status completed, empty output (NeMo Gym's reward: 0.0)")
    ]  # fmt: skip
    assert _health(tmp_path / "g")["verdict"] != "healthy"
    # abstention: five different questions are five tasks, ids from the rows' own `id`
    lines = _lines(DATA / "abstention" / "example_rollouts.jsonl")
    result = import_rollouts(DATA / "abstention" / "example_rollouts.jsonl", tmp_path / "a")
    assert result["tasks"] == 5
    ids = {row[0] for row in _query(tmp_path / "a", "SELECT task_id FROM tasks")}
    assert ids == {str(line["id"]) for line in lines}


def test_chat_completions_usage_is_read(tmp_path: Path) -> None:
    path = DATA / "mrcr" / "example_rollouts.jsonl"
    usage = [line["response"]["usage"] for line in _lines(path)]
    assert all("prompt_tokens" in u and "input_tokens" not in u for u in usage)
    import_rollouts(path, tmp_path / "run")
    stored = _query(tmp_path / "run", "SELECT sum(input_tokens), sum(output_tokens) FROM rollouts")
    assert stored[0] == (
        sum(u["prompt_tokens"] for u in usage),
        sum(u["completion_tokens"] for u in usage),
    )


def test_a_duplicate_pair_is_imported_and_health_reports_it(tmp_path: Path) -> None:
    path = DATA / "graphwalks" / "example_rollouts.jsonl"
    keys = [(line["_ng_task_index"], line["_ng_rollout_index"]) for line in _lines(path)]
    assert keys.count((11, 0)) == 2
    out = gym("import", "nemo-gym", str(path), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "1 duplicate (task, rollout) pairs" in out.stdout
    assert _query(tmp_path / "run", "SELECT count(*) FROM rollouts")[0][0] == 3
    checked = _health(tmp_path / "run")
    assert checked["verdict"] != "healthy"
    assert "duplicate_identity" in checked["failing_checks"]
    flagged = checked["checks"]["duplicate_identity"]
    assert flagged["count"] == 2


def test_multi_turn_outputs_count_one_call_per_assistant_turn(tmp_path: Path) -> None:
    path = DATA / "example_multi_turn_gymnasium" / "example_rollouts.jsonl"
    import_rollouts(path, tmp_path / "run")
    calls = dict(
        _query(
            tmp_path / "run",
            "SELECT t.task_index, r.num_model_calls FROM rollouts r JOIN tasks t USING (task_id)",
        )
    )
    for line in _lines(path):
        roles = [item["role"] for item in line["response"]["output"]]
        assert calls[line["_ng_task_index"]] == roles.count("assistant") > 1


def test_aviary_transitions_are_one_call_each(tmp_path: Path) -> None:
    path = DATA / "aviary" / "example_rollouts.jsonl"
    (line,) = _lines(path)
    import_rollouts(path, tmp_path / "run")
    calls, trajectory = _query(
        tmp_path / "run", "SELECT num_model_calls, trajectory_json FROM rollouts"
    )[0]
    assert calls == len(line["response"]["output"])
    assert json.loads(trajectory)[-1] == line["response"]["output"][-1][-1]


def test_materialized_inputs_keep_a_task_that_has_no_rollout(tmp_path: Path) -> None:
    source = DATA / "example_multi_turn_gymnasium"
    shutil.copy(source / "example_rollouts_materialized_inputs.jsonl", tmp_path)
    lines = (source / "example_rollouts.jsonl").read_text().splitlines()
    dropped = json.loads(lines[2])["_ng_task_index"]  # its only rollout never came back
    (tmp_path / "example_rollouts.jsonl").write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    result = import_rollouts(tmp_path / "example_rollouts.jsonl", tmp_path / "run")
    assert (result["tasks"], result["rollouts"], result["missing"]) == (5, 4, 1)
    checked = _health(tmp_path / "run")
    missing = checked["checks"]["missing_rollout"]
    task_id = _query(tmp_path / "run", f"SELECT task_id FROM tasks WHERE task_index = {dropped}")
    assert missing["count"] == 1 and missing["examples"] == [f"{task_id[0][0]}#0"]


def test_two_imports_of_different_subsets_compare_on_common_tasks(tmp_path: Path) -> None:
    lines = (DATA / "abstention" / "example_rollouts.jsonl").read_text().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[1:]) + "\n")
    for name in ("a", "b"):
        gym("import", "nemo-gym", f"{name}.jsonl", "--out", name, cwd=tmp_path, check=True)
    versions = {
        name: _query(tmp_path / name, "SELECT benchmark_version FROM runs")[0][0]
        for name in ("a", "b")
    }
    assert versions["a"] == versions["b"]  # the protocol, not the rows each file held
    out = gym("eval", "profile", "a", "--compare", "b", "--json", cwd=tmp_path, check=True)
    compared = json.loads(out.stdout)
    assert compared["tasks"] == 2
    unpaired = {  # counts, or the ids themselves
        side: len(value) if isinstance(value, list) else value
        for side, value in compared["unpaired_tasks"].items()
    }
    assert unpaired == {"a_only": 1, "b_only": 2}


def test_grouping_uses_task_fields_not_sampling_or_verifier_outputs(tmp_path: Path) -> None:
    base = _lines(DATA / "abstention" / "example_rollouts.jsonl")[0]
    del base["id"]

    def variant(**fields) -> dict:
        row = json.loads(json.dumps(base))
        for key, value in fields.items():
            if key == "temperature":
                row["responses_create_params"]["temperature"] = value
            else:
                row[key] = value
        return row

    rows = [
        # one task: sampling, scores and the verifier's extraction differ between its repeats
        variant(difficulty="easy", temperature=0.2, extracted_answer="a", is_correct=True),
        variant(difficulty="easy", temperature=0.9, extracted_answer="b", is_correct=False),
        # same request, another task field: another task (newton_bench asks one question at
        # three difficulties)
        variant(difficulty="hard", extracted_answer="a", is_correct=True),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = import_rollouts(path, tmp_path / "run")
    assert (result["tasks"], result["rollouts"], result["repeats"]) == (2, 3, 2)
    grouped = _query(
        tmp_path / "run",
        "SELECT t.task_index, list(r.repeat_index ORDER BY r.repeat_index) "
        "FROM rollouts r JOIN tasks t USING (task_id) GROUP BY 1 ORDER BY 1",
    )
    assert grouped == [(0, [0, 1]), (1, [0])]


def test_tags_and_task_fields_are_kept(tmp_path: Path) -> None:
    lines = _lines(DATA / "abstention" / "example_rollouts.jsonl")
    lines[0]["tags"] = ["science", "hard"]
    path = tmp_path / "tagged.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    import_rollouts(path, tmp_path / "run")
    tags, data = _query(
        tmp_path / "run", f"SELECT tags, data_json FROM tasks WHERE task_id = '{lines[0]['id']}'"
    )[0]
    assert tags == ["science", "hard"]
    assert json.loads(data)["ground_truth"] == lines[0]["ground_truth"]
    details = json.loads(
        _query(tmp_path / "run", "SELECT details_json FROM verifications ORDER BY rollout_id")[0][0]
    )
    assert {"source", "line", "fields"} <= set(details)
