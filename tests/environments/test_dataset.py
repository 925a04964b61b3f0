"""Dataset benchmarks in-process: each file format and the Hub (a local cache written here, read
offline through huggingface_hub and datasets) to the same tasks; content-hash ids and versions;
every bad row named by file, row and field; NeMo Gym rows as their own request; the simulated
policy on tasks it cannot answer; the exact and regex verifiers."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from gymflow.core.config import ConfigError, EvalConfig, HarnessConfig
from gymflow.core.tasks import Task
from gymflow.environments.registry import PATH_VARIABLE, load_environment
from gymflow.harness.base import opening_items
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.validate import validate_config
from gymflow.simulated.policy import build_table, prompt_key
from gymflow.simulated.policy_server import PolicyApp
from gymflow.verifiers.base import VerifyInput, get_verifier
from tests.conftest import require_tool

ROWS = [
    {"id": "q1", "question": "What is 2 + 3?", "answer": 5, "topic": "add", "level": "easy"},
    {"id": "q2", "question": "What is 7 * 6?", "answer": 42, "topic": "mul", "level": "easy"},
    {"id": "q3", "question": "What is 100 - 1?", "answer": 99, "topic": "sub", "level": "hard"},
]
HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """The rows in the format `path`'s suffix names (CSV cells are text, as any CSV's are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".csv":
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_benchmark(root: Path, name: str, dataset: dict[str, Any], **extra: Any) -> Path:
    """benchmarks/NAME.yaml under `root` (a GYMFLOW_ENVIRONMENTS_PATH folder)."""
    body = {
        "name": name,
        "dataset": dataset,
        "verifier": {"name": "numeric_match"},
        "prompt_template": "{{ question }}\nGive your final answer as: Answer: <number>",
        **extra,
    }
    path = root / "benchmarks" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


MAPPED = {"id": "id", "verifier": {"answer": "answer"}, "tags": "topic", "difficulty": "level"}


def write_hub_cache(
    home: Path, repo: str, rows: list[dict[str, Any]], configs: dict[str, list] | None = None
) -> None:
    """A Hugging Face cache as `huggingface_hub` leaves it after downloading `repo` at
    HUB_COMMIT (refs/main names the commit; the snapshot holds the Hub's default file layout,
    or with `configs` one folder per config, declared in the dataset card as the Hub does)."""
    folder = home / "hub" / ("datasets--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / HUB_COMMIT
    write_rows(snapshot / "data" / "test-00000-of-00001.parquet", rows)
    if configs:
        card = [{"config_name": "default", "data_files": [{"split": "test", "path": "data/*"}]}]
        for name, config_rows in configs.items():
            write_rows(snapshot / name / "test-00000-of-00001.parquet", config_rows)
            card.append(
                {"config_name": name, "data_files": [{"split": "test", "path": f"{name}/*"}]}
            )
        (snapshot / "README.md").write_text(f"---\n{yaml.safe_dump({'configs': card})}---\n")
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(HUB_COMMIT)


@pytest.fixture
def hub_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face home of this test's own, offline: nothing here may reach the Hub."""
    home = tmp_path / "hf-home"
    for name, value in {"HF_HOME": home, "HF_HUB_OFFLINE": 1, "HF_DATASETS_OFFLINE": 1}.items():
        monkeypatch.setenv(name, str(value))
    # Both libraries read these once, on import, which an earlier test may have done.
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    return home


def _plan(root: Path, name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(PATH_VARIABLE, str(root))
    return resolve(EvalConfig(benchmark=name, out=str(root / "runs" / name)))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_every_file_format_gives_the_same_tasks(tmp_path, monkeypatch, suffix) -> None:
    write_rows(tmp_path / "benchmarks" / f"data{suffix}", ROWS)
    write_benchmark(tmp_path, "sums", {"path": f"data{suffix}", "fields": MAPPED})
    plan = _plan(tmp_path, "sums", monkeypatch)
    assert [t.task_id for t in plan.all_tasks] == ["q1", "q2", "q3"]
    first = plan.all_tasks[0]
    assert first.data == {"answer": 5}  # CSV's "5" is read as the number the verifier needs
    assert first.tags == ("add",) and first.difficulty == "easy"
    assert first.reference == "Answer: 5"  # what the simulated policy answers from
    assert plan.prompts["q1"].startswith("What is 2 + 3?")
    _, rows = plan.benchmark_version.split(".")
    assert rows == plan.dataset_version
    assert plan.env.manifest.verifier.name == "numeric_match"


def test_rows_without_ids_get_content_hash_ids_and_a_changed_row_is_a_new_version(
    tmp_path, monkeypatch
) -> None:
    data = write_rows(tmp_path / "a" / "benchmarks" / "d.jsonl", ROWS)
    write_benchmark(tmp_path / "a", "noid", {"path": "d.jsonl"})
    before = _plan(tmp_path / "a", "noid", monkeypatch)
    ids = [t.task_id for t in before.all_tasks]
    assert all(i.startswith("noid-") for i in ids) and len(set(ids)) == 3
    # Same rows in another folder: the same ids and version (the path is not the protocol).
    write_rows(tmp_path / "b" / "benchmarks" / "d.jsonl", ROWS)
    write_benchmark(tmp_path / "b", "noid", {"path": "d.jsonl"})
    same = _plan(tmp_path / "b", "noid", monkeypatch)
    assert [t.task_id for t in same.all_tasks] == ids
    assert same.benchmark_version == before.benchmark_version
    # One changed answer: that row's id and the rows' version change, the protocol does not.
    changed = [*ROWS[:2], {**ROWS[2], "answer": 98}]
    write_rows(tmp_path / "c" / "benchmarks" / "d.jsonl", changed)
    write_benchmark(tmp_path / "c", "noid", {"path": "d.jsonl"})
    after = _plan(tmp_path / "c", "noid", monkeypatch)
    assert [t.task_id for t in after.all_tasks][:2] == ids[:2]
    assert after.all_tasks[2].task_id != ids[2]
    assert after.dataset_version != before.dataset_version
    assert after.benchmark_version.split(".")[0] == before.benchmark_version.split(".")[0]
    # The same rows as Parquet: the same version (CSV's rows are text, so they are other rows).
    write_rows(tmp_path / "d" / "benchmarks" / "d.parquet", ROWS)
    write_benchmark(tmp_path / "d", "noid", {"path": "d.parquet"})
    assert _plan(tmp_path / "d", "noid", monkeypatch).benchmark_version == before.benchmark_version
    assert data.exists()


def test_limit_reads_only_the_rows_used_and_versions_them(tmp_path, monkeypatch) -> None:
    rows = [{"id": f"r{i}", "question": f"{i}?", "answer": i} for i in range(10)]
    write_rows(tmp_path / "benchmarks" / "d.jsonl", [*rows, {"broken": True}])
    write_benchmark(tmp_path, "few", {"path": "d.jsonl", "fields": {"id": "id"}}, limit=4)
    plan = _plan(tmp_path, "few", monkeypatch)  # the bad last row is never read
    assert [t.task_id for t in plan.all_tasks] == ["r0", "r1", "r2", "r3"]


def test_validate_names_every_bad_row_with_file_row_and_field(tmp_path, monkeypatch) -> None:
    rows = [
        ROWS[0],
        {**ROWS[1], "answer": "forty-two"},  # not a number
        {"id": "q3", "question": "?", "topic": ["sub", 3]},  # no answer; a tag that is no text
        "not an object",
        {"id": "q5", "question": "?", "answer": float("inf")},
    ]
    data = tmp_path / "benchmarks" / "bad.jsonl"
    data.parent.mkdir(parents=True)
    lines = [json.dumps(row) for row in rows[:4]] + ['{"id": "q5", "answer": Infinity}', "{oops"]
    data.write_text("\n".join(lines) + "\n")
    write_benchmark(tmp_path, "bad", {"path": "bad.jsonl", "fields": MAPPED})
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: bad\nout: runs/bad\n")
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    report = validate_config(config)
    assert not report.ok
    problems = report.problems
    assert all(p.startswith(f"{data}: line ") for p in problems), problems
    expect = [
        "line 2: field 'answer' (verifier numeric_match reads 'answer' as number): "
        "expected a number: 'forty-two'",
        "line 3: field 'answer' (verifier numeric_match reads 'answer' as number): missing",
        "line 3: field 'topic' (tags): expected text or texts: ['sub', 3]",
        "line 4: expected a JSON object, got str",
        "line 5: not JSON",
        "line 6: not JSON",
    ]
    for fragment in expect:
        assert any(fragment in p for p in problems), (fragment, problems)
    assert len(problems) == len(expect)
    assert not (tmp_path / "runs").exists()


def test_a_bad_column_is_one_problem_naming_the_first_rows(tmp_path, monkeypatch) -> None:
    rows = [{"id": f"r{i}", "question": "?", "answer": "n/a"} for i in range(40)]
    write_rows(tmp_path / "benchmarks" / "d.csv", rows)
    write_benchmark(tmp_path, "col", {"path": "d.csv", "fields": {"id": "id"}})
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        resolve(EvalConfig(benchmark="col", out=str(tmp_path / "runs")))
    (problem,) = str(caught.value).splitlines()
    assert "d.csv: line 2, line 3, line 4, line 5, line 6 and 35 more rows: field 'answer'" in (
        problem
    )


def test_a_mapping_that_leaves_out_what_the_verifier_reads_names_the_benchmark(
    tmp_path, monkeypatch
) -> None:
    write_rows(tmp_path / "benchmarks" / "d.jsonl", ROWS)
    bench = write_benchmark(
        tmp_path, "unmapped", {"path": "d.jsonl", "fields": {"verifier": {"gold": "answer"}}}
    )
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: unmapped\n")
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    problems = validate_config(config).problems
    assert problems == [
        f"{bench}: dataset.fields.verifier: numeric_match reads 'answer' (number), which is not "
        "mapped"
    ]


def test_hub_dataset_loads_from_the_cache_with_its_revision_pinned(
    tmp_path, monkeypatch, hub_home
) -> None:
    write_hub_cache(hub_home, "acme/sums", ROWS)
    hub = {"name": "acme/sums", "split": "test", "revision": "main"}
    write_benchmark(tmp_path, "hubsums", {"hub": hub, "fields": MAPPED})
    plan = _plan(tmp_path, "hubsums", monkeypatch)
    assert [t.task_id for t in plan.all_tasks] == ["q1", "q2", "q3"]
    assert plan.all_tasks[1].data == {"answer": 42}
    loaded = plan.env.load()
    assert loaded.commit == HUB_COMMIT
    assert loaded.source == f"hub:acme/sums@{HUB_COMMIT[:12]} (default/test)"
    # The same rows from a local file: the version differs by the Hub commit alone.
    write_rows(tmp_path / "local" / "benchmarks" / "d.parquet", ROWS)
    write_benchmark(tmp_path / "local", "hubsums", {"path": "d.parquet", "fields": MAPPED})
    assert _plan(tmp_path / "local", "hubsums", monkeypatch).dataset_version != (
        plan.dataset_version
    )


def test_hub_dataset_config_is_chosen_by_name(tmp_path, monkeypatch, hub_home) -> None:
    write_hub_cache(hub_home, "acme/levels", ROWS, configs={"hard": ROWS[2:]})
    hub = {"name": "acme/levels", "config": "hard", "split": "test", "revision": HUB_COMMIT}
    write_benchmark(tmp_path, "hard", {"hub": hub, "fields": MAPPED})
    plan = _plan(tmp_path, "hard", monkeypatch)
    assert [t.task_id for t in plan.all_tasks] == ["q3"]
    assert plan.env.load().source.endswith("(hard/test)")
    write_benchmark(tmp_path, "nosuch", {"hub": {**hub, "config": "nosuch"}, "fields": MAPPED})
    with pytest.raises(ConfigError, match="config 'nosuch' split 'test'"):
        resolve(EvalConfig(benchmark="nosuch", out=str(tmp_path / "runs")))


def test_hub_dataset_missing_from_the_cache_is_a_clear_error(
    tmp_path, monkeypatch, hub_home
) -> None:
    hub = {"name": "acme/absent", "revision": HUB_COMMIT}
    write_benchmark(tmp_path, "absent", {"hub": hub})
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    with pytest.raises(ConfigError, match="not in the Hugging Face cache"):
        resolve(EvalConfig(benchmark="absent", out=str(tmp_path / "runs")))


NEMO_ROW = {
    "responses_create_params": {
        "input": [
            {"role": "system", "content": "You are a careful calculator."},
            {"role": "user", "content": "What is 6 * 7? Reply with the number only."},
        ],
        "tools": [
            {
                "type": "function",
                "name": "calculator",
                "description": "Evaluates an arithmetic expression.",
                "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
            }
        ],
    },
    "expected_answer": "42",
    "task_id": "ng-1",
}


def test_nemo_gym_rows_are_their_own_request(tmp_path, monkeypatch) -> None:
    write_rows(tmp_path / "benchmarks" / "ng.jsonl", [NEMO_ROW])
    dataset = {
        "path": "ng.jsonl",
        "format": "nemo_gym",
        "fields": {"id": "task_id", "verifier": {"answer": "expected_answer"}},
    }
    write_benchmark(tmp_path, "ng", dataset, verifier={"name": "exact_match"}, prompt_template=None)
    plan = _plan(tmp_path, "ng", monkeypatch)
    (task,) = plan.all_tasks
    assert task.task_id == "ng-1" and task.data == {"answer": "42"}
    assert task.tools == tuple(NEMO_ROW["responses_create_params"]["tools"])
    items = opening_items(plan.prompts["ng-1"], HarnessConfig(), task)
    assert items == NEMO_ROW["responses_create_params"]["input"]
    assert plan.env.resources_server().tools_for(task) == list(task.tools)
    # The local policy recognises the request by its first user message, and answers it.
    table = build_table([task], [plan.prompts["ng-1"]], skill_seed=0)
    assert prompt_key("What is 6 * 7? Reply with the number only.") in table
    reply = PolicyApp(table).respond({"input": items, "seed": 0})
    texts = [c["text"] for o in reply["output"] for c in o.get("content", [])]
    assert texts in (["42"], ["not 42"])
    # gym env validate: the rows' own first user message is the prompt; nothing else needed
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: ng\n")
    report = validate_config(config)
    assert report.ok, report.problems
    assert "first row (line 1) renders as 'What is 6 * 7? Reply with the number only.'" in (
        report.passed
    )


def test_code_execution_with_the_rows_tests_runs_in_the_verifier_workers(
    tmp_path, monkeypatch
) -> None:
    """code_exec is bounded, so a worker process rebuilds the dataset's environment from its
    manifest (through environments/dataset/env.py) and runs the row's tests in the sandbox."""
    require_tool("bwrap")
    rows = [
        {
            "id": "add",
            "prompt": 'def add(a, b):\n    """The sum of a and b."""\n',
            "test": "def check(f):\n    assert f(2, 3) == 5\n",
            "entry_point": "add",
            "solution": "```python\ndef add(a, b):\n    return a + b\n```",
        }
    ]
    write_rows(tmp_path / "benchmarks" / "code.jsonl", rows)
    write_benchmark(
        tmp_path, "code", {"path": "code.jsonl", "fields": {"id": "id", "reference": "solution"}},
        verifier={"name": "code_exec", "params": {"timeout_s": 10}},
        prompt_template="Complete:\n{{ prompt }}",
    )  # fmt: skip
    plan = _plan(tmp_path, "code", monkeypatch)
    (task,) = plan.all_tasks
    assert set(task.data) == {"prompt", "test", "entry_point"}
    server = plan.env.resources_server()
    assert server.verify_timeout is not None  # bounded: verified in a worker process
    right = server.verify_bounded(VerifyInput(task, task.reference))
    wrong = server.verify_bounded(VerifyInput(task, "def add(a, b):\n    return a - b\n"))
    assert (right.status, right.passed) == ("ok", True), right
    assert (wrong.status, wrong.passed, wrong.details["reason"]) == ("ok", False, "tests_failed")


def test_the_simulated_policy_says_what_it_cannot_answer(tmp_path, monkeypatch) -> None:
    rows = [{"id": "p1", "question": "Name a colour.", "pattern": "(?i)red|blue|green"}]
    write_rows(tmp_path / "benchmarks" / "re.jsonl", rows)
    write_benchmark(
        tmp_path, "colours", {"path": "re.jsonl", "fields": {"id": "id"}},
        verifier={"name": "regex_match"},
    )  # fmt: skip
    plan = _plan(tmp_path, "colours", monkeypatch)
    (task,) = plan.all_tasks
    assert task.reference == "" and task.distractor == ""
    said = plan.env.simulation()
    assert "can answer 0 of 1 tasks (regex_match gives it no answer to write" in said
    assert "use a real model" in said
    table = build_table([task], [plan.prompts["p1"]], skill_seed=0)
    reply = PolicyApp(table).respond({"input": plan.prompts["p1"], "seed": 1})
    text = reply["output"][0]["content"][0]["text"]
    assert "simulated policy" in text and "carries no reference answer" in text
    # A mapped reference field is what it then answers from.
    rows[0]["good"] = "Blue."
    write_rows(tmp_path / "r2" / "benchmarks" / "re.jsonl", rows)
    write_benchmark(
        tmp_path / "r2", "colours", {"path": "re.jsonl", "fields": {"reference": "good"}},
        verifier={"name": "regex_match"},
    )  # fmt: skip
    plan = _plan(tmp_path / "r2", "colours", monkeypatch)
    assert plan.all_tasks[0].reference == "Blue."
    assert "answers all 1 tasks from the mapped reference field 'good'" in plan.env.simulation()


def _verify(name: str, data: dict[str, Any], text: str, **params: Any):
    spec = get_verifier(name)
    task = Task("t", {}, data, "", "")
    return spec.fn(VerifyInput(task, text), spec.params(params))


def test_exact_match() -> None:
    assert _verify("exact_match", {"answer": "Paris"}, "  paris ").reward == 1.0
    assert _verify("exact_match", {"answer": "Paris"}, "paris", ignore_case=False).reward == 0.0
    assert _verify("exact_match", {"answer": 42}, "Answer: 42", extract="answer_line").reward == 1
    last = _verify("exact_match", {"answer": "B"}, "I think\nB", extract="last_line")
    assert last.reward == 1.0 and last.details["reason"] == "match"
    punct = _verify("exact_match", {"answer": "yes"}, '"Yes."', strip_punctuation=True)
    assert punct.reward == 1.0
    none = _verify("exact_match", {"answer": "x"}, "no line", extract="answer_line")
    assert none.details["reason"] == "no_answer_extracted"


def test_regex_match() -> None:
    assert _verify("regex_match", {"pattern": r"\b4\d\b"}, "it is 42").reward == 1.0
    full = _verify("regex_match", {"pattern": r"\d+"}, "it is 42", mode="fullmatch")
    assert full.reward == 0.0 and full.details["reason"] == "no_match"
    # what a lenient reading finds, for the diagnosis: the pattern anywhere in the response
    assert full.details["lenient_match"] == "42"
    line = _verify("regex_match", {"pattern": r"\d+"}, "it is 42", extract="answer_line")
    assert line.details == {
        "reason": "no_answer_extracted",
        "pattern": r"\d+",
        "lenient_match": "42",
    }
    assert "lenient_match" not in _verify("regex_match", {"pattern": "7"}, "it is 42").details
    assert _verify("regex_match", {"pattern": "RED"}, "red", ignore_case=True).reward == 1.0
    from gymflow.verifiers.base import VerifierError

    with pytest.raises(VerifierError, match="does not compile"):
        _verify("regex_match", {"pattern": "("}, "x")


def test_a_benchmark_needs_both_dataset_and_verifier(tmp_path, monkeypatch) -> None:
    bench = write_benchmark(tmp_path, "half", {"path": "d.jsonl"})
    body = yaml.safe_load(bench.read_text())
    del body["verifier"]
    bench.write_text(yaml.safe_dump(body))
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    from gymflow.environments.registry import RegistryError

    with pytest.raises(RegistryError, match=r"verifier: .*a dataset benchmark names its verifier"):
        load_environment("half")


def test_resuming_a_run_after_its_dataset_changed_is_refused(tmp_path, monkeypatch) -> None:
    from gymflow.rollouts.registration import register_run
    from gymflow.store.db import StoreError, connect

    out = tmp_path / "runs" / "sums"
    plans = []
    for root, rows in (
        (tmp_path / "a", ROWS),
        (tmp_path / "b", [*ROWS[:2], ROWS[0] | {"id": "x"}]),
    ):
        write_rows(root / "benchmarks" / "d.jsonl", rows)
        write_benchmark(root, "sums", {"path": "d.jsonl", "fields": MAPPED})
        monkeypatch.setenv(PATH_VARIABLE, str(root))
        plans.append(resolve(EvalConfig(benchmark="sums", out=str(out))))
    before, after = plans
    assert before.run_id == after.run_id  # the same config: only the rows differ
    con = connect(out, create=True)
    try:
        register_run(con, before, resume=False)
        register_run(con, before, resume=True)  # the same rows resume
        with pytest.raises(StoreError, match="dataset or protocol changed"):
            register_run(con, after, resume=True)
    finally:
        con.close()


def test_the_shipped_word_problems_validate_and_their_answers_pass(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(PATH_VARIABLE, raising=False)
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: word-problems\n")
    report = validate_config(config)
    assert report.ok, report.problems
    assert any("50 rows; every mapped field present" in line for line in report.passed)
    plan = resolve(EvalConfig(benchmark="word-problems", out=str(tmp_path / "runs")))
    server = plan.env.resources_server()
    verdicts = [
        (server.verify_sync(VerifyInput(t, t.reference)).passed,
         server.verify_sync(VerifyInput(t, t.distractor)).passed)
        for t in plan.all_tasks
    ]  # fmt: skip
    assert verdicts == [(True, False)] * 50
    assert {t.difficulty for t in plan.all_tasks} == {"easy", "medium", "hard"}


def test_ifeval_constraints_from_csv_json_text(tmp_path, monkeypatch) -> None:
    constraints = [{"kind": "include_keywords", "keywords": ["tea"]}]
    rows = [
        {"id": "i1", "instruction": "Write about tea.", "constraints": json.dumps(constraints)},
        {"id": "i2", "instruction": "Write.", "constraints": "include tea"},  # not JSON
    ]
    write_rows(tmp_path / "benchmarks" / "if.csv", rows)
    write_benchmark(
        tmp_path, "inst", {"path": "if.csv", "fields": {"id": "id"}},
        verifier={"name": "ifeval"}, prompt_template="{{ instruction }}",
    )  # fmt: skip
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    with pytest.raises(ConfigError, match=r"if.csv: line 3: field 'constraints' .* as list\)"):
        resolve(EvalConfig(benchmark="inst", out=str(tmp_path / "runs")))
    write_rows(tmp_path / "ok" / "data" / "if.csv", rows[:1])
    write_benchmark(
        tmp_path / "ok", "inst", {"path": "../data/if.csv", "fields": {"id": "id"}},
        verifier={"name": "ifeval"}, prompt_template="{{ instruction }}",
    )  # fmt: skip
    (task,) = _plan(tmp_path / "ok", "inst", monkeypatch).all_tasks
    assert task.data == {"constraints": constraints}
    assert _verify("ifeval", task.data, "I like tea.").reward == 1.0


@pytest.mark.parametrize("escape", ["../../secret.jsonl", "/SECRET", "link.jsonl"])
def test_a_dataset_path_cannot_leave_the_benchmarks_folder(tmp_path, monkeypatch, escape) -> None:
    """A downloaded benchmark folder must not read ~/.ssh or /etc into a run's store: not by
    `..`, an absolute path or a symlink; the error names the file and the field."""
    secret = write_rows(tmp_path / "secret.jsonl", ROWS)
    root = tmp_path / "downloaded"
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "link.jsonl").symlink_to(secret)
    path = escape.replace("/SECRET", str(secret))
    yaml_file = write_benchmark(root, "sums", {"path": path, "fields": MAPPED})
    with pytest.raises(ConfigError) as caught:
        _plan(root, "sums", monkeypatch)
    assert str(caught.value) == (
        f"{yaml_file}: dataset.path: {path!r} is outside {root.resolve()} (a benchmark reads "
        "only files under the folder that holds its benchmarks/)"
    )
