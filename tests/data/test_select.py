"""`gym data select` on a run whose per-task pass rates are known: the exact tasks each filter
keeps, the NeMo Gym rows and benchmark written, and the provenance recorded with them."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml

from gymflow.data.provenance import read_provenance
from gymflow.data.select import Band, SelectionError, parse_band
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym, gym_in_process

# task: (outcomes per repeat, tags, difficulty, output tokens); '-' leaves the repeat missing
TASKS = {
    "always": ("1111", ("algebra",), "easy", 10),
    "three-quarters": ("1110", ("algebra", "word"), "easy", 10),
    "half": ("1100", ("word",), "medium", 40),
    "quarter": ("1000", ("geometry",), "hard", 80),
    "never": ("0000", ("geometry",), "hard", 80),
    "missing": ("----", (), None, 10),
    "half-partial": ("10--", ("word",), "medium", 10),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = StoreBuilder(RunMeta(repeats=4))
    for i, (task_id, (outcomes, tags, difficulty, tokens)) in enumerate(TASKS.items()):
        b.task(task_id, 10 + i, tags=tags, difficulty=difficulty)
        for repeat, mark in enumerate(outcomes):
            if mark != "-":
                b.rollout(task_id, repeat, correct=mark == "1", output_tokens=tokens)
    return b.write(tmp_path_factory.mktemp("select") / "run")


def _select(run: Path, *args: str) -> dict:
    """A dry run's JSON, in-process: a read of the store (the writes below run `gym`)."""
    result = gym_in_process(
        "data", "select", str(run), "--dry-run", "--json", *args, cwd=run.parent
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        ((), ["half", "half-partial", "quarter", "three-quarters"]),
        (("--pass-rate", "[0,1]"), sorted(set(TASKS) - {"missing"})),
        (("--pass-rate", "[0,0.5]"), ["half", "half-partial", "never", "quarter"]),
        (("--pass-rate", "(0.25,1]"), ["always", "half", "half-partial", "three-quarters"]),
        (("--pass-rate", "[0.25,0.5)"), ["quarter"]),
        (("--bucket", "missing"), ["missing"]),
        (("--bucket", "always_pass", "--bucket", "never_pass"), ["always", "never"]),
        (
            ("--bucket", "sometimes_pass", "--pass-rate", "[0.5,1]"),
            ["half", "half-partial", "three-quarters"],
        ),
        (("--tag", "word"), ["half", "half-partial", "three-quarters"]),
        (("--tag", "algebra", "--tag", "geometry"), ["quarter", "three-quarters"]),
        (("--difficulty", "hard", "--pass-rate", "[0,1]"), ["never", "quarter"]),
        (("--max-output-tokens", "40"), ["half", "half-partial", "three-quarters"]),
    ],
)
def test_filters_keep_exactly_these_tasks(run: Path, args: tuple[str, ...], kept: list) -> None:
    payload = _select(run, *args)
    assert payload["task_ids"] == kept
    assert payload["counts"]["kept"] == len(kept)
    assert payload["counts"]["tasks"] == len(TASKS)


def test_counts_say_what_each_filter_rejects(run: Path) -> None:
    counts = _select(run, "--tag", "word")["counts"]
    # (0,1) rejects always, never and missing; the tag rejects every task without "word"
    assert counts["rejected_by"] == {"pass_rate": 3, "tags": 4}
    assert counts["kept_by_bucket"] == {
        "always_pass": 0,
        "sometimes_pass": 3,
        "never_pass": 0,
        "missing": 0,
    }
    assert counts["rollouts"] == 4 + 4 + 2


def test_selection_writes_nemo_gym_rows_a_benchmark_and_provenance(run: Path) -> None:
    out = run.parent / "picked" / "benchmarks"
    result = gym_in_process(
        *("data", "select", str(run), "--out", str(out.parent), "--name", "hard-ones"),
        *("--pass-rate", "[0,0.5]", "--parquet"),
        cwd=run.parent,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "hard-ones.jsonl").read_text().splitlines()]
    assert [r["_gymflow"]["task_id"] for r in rows] == ["half", "half-partial", "never", "quarter"]
    half = rows[0]
    assert half["responses_create_params"]["input"] == [
        {"type": "message", "role": "user", "content": "question half"}
    ]
    assert "tools" not in half["responses_create_params"]  # none were offered
    assert half["answer"] == 12  # the verifier's data, at the top level as NeMo Gym rows have it
    assert half["_gymflow"] | {"tags": None} == {
        "task_id": "half",
        "tags": None,
        "difficulty": "medium",
        "reference": "Answer: 12",
        "n": 4,
        "c": 2,
        "pass_rate": 0.5,
        "bucket": "sometimes_pass",
    }
    assert half["_gymflow"]["tags"] == ["word"]

    meta = read_provenance(out / "hard-ones.jsonl")
    assert meta == json.loads((out / "hard-ones.meta.json").read_text())
    assert meta["kind"] == "task_selection"
    assert meta["run"]["run_id"] == "run-a" and meta["run"]["model"] == "model-a"
    assert meta["verifier_version"].startswith("numeric_match@")
    assert meta["filters"]["pass_rate"] == "[0,0.5]"
    assert meta["counts"]["kept"] == 4 and meta["gymflow_version"]
    assert read_provenance(out / "hard-ones.parquet") == meta
    table = pq.read_table(out / "hard-ones.parquet")
    assert table.column("task_id").to_pylist() == ["half", "half-partial", "never", "quarter"]
    assert table.column("pass_rate").to_pylist() == [0.5, 0.5, 0.0, 0.25]

    benchmark = yaml.safe_load((out / "hard-ones.yaml").read_text())
    assert benchmark["dataset"]["path"] == "hard-ones.jsonl"
    assert benchmark["dataset"]["format"] == "nemo_gym"
    assert benchmark["verifier"]["name"] == "numeric_match"
    assert benchmark["verifier"]["params"]["extract"] == "answer_line"
    assert benchmark["repeats"] == 4


def test_bad_filters_and_empty_selections_are_one_line_errors(run: Path) -> None:
    cases = {
        ("--pass-rate", "0..1"): "--pass-rate '0..1': write an interval",
        ("--pass-rate", "(0.5,0.2)"): "need 0 <= low <= high <= 1",
        ("--bucket", "sometimes"): "--bucket sometimes: unknown",
        ("--tag", "nothing-has-this"): "no task passes these filters; nothing written",
        ("--out", "/proc/gymflow"): "/proc/gymflow/benchmarks: cannot create the folder",
    }
    for args, message in cases.items():
        out = run.parent / "never-written"
        result = gym_in_process(
            "data", "select", str(run), "--out", str(out), *args, cwd=run.parent
        )
        if "--out" in args:
            out = Path(args[-1])
        assert result.returncode == 1
        assert message in result.stderr
        assert "Traceback" not in result.stderr
        assert not out.exists()


def test_band_parsing() -> None:
    assert parse_band("(0,1)") == Band(0.0, 1.0, False, False)
    assert parse_band(" [0.2, 0.8] ") == Band(0.2, 0.8, True, True)
    assert str(parse_band("(0,0.5]")) == "(0,0.5]"
    with pytest.raises(SelectionError):
        parse_band("[0,nan]")


def test_selected_dataset_runs_again_as_a_benchmark(run: Path, prefect_api: str) -> None:
    """The written benchmark evaluates exactly the selected tasks, through `gym eval run`."""
    out = run.parent / "again"
    result = gym(
        "data", "select", str(run), "--out", str(out), "--name", "informative", cwd=run.parent
    )
    assert result.returncode == 0, result.stderr
    assert f"GYMFLOW_BENCHMARKS_PATH={out} gym eval run --benchmark informative" in " ".join(
        result.stdout.split()
    )
    env = {"GYMFLOW_BENCHMARKS_PATH": str(out), "PREFECT_API_URL": prefect_api}
    rerun = run.parent / "rerun"
    gym(
        *("eval", "run", "--benchmark", "informative", "--repeats", "2", "--out", str(rerun)),
        cwd=run.parent,
        env=env,
        check=True,
    )
    con = duckdb.connect(str(rerun / "gymflow.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT benchmark, environment, harness FROM runs").fetchall() == [
            ("informative", "informative", "single_turn")
        ]
        tasks = con.execute(
            "SELECT task_id, prompt, tags, difficulty FROM tasks ORDER BY task_id"
        ).fetchall()
        assert tasks == [
            (task_id, f"question {task_id}", list(TASKS[task_id][1]), TASKS[task_id][2])
            for task_id in ["half", "half-partial", "quarter", "three-quarters"]
        ]
        verified = con.execute(
            "SELECT count(*) FROM rollouts r JOIN verifications v USING (rollout_id) "
            "WHERE r.status = 'completed' AND v.status = 'ok' "
            "AND v.verifier_version LIKE 'numeric_match@%'"
        ).fetchone()[0]
        assert verified == 4 * 2
    finally:
        con.close()
