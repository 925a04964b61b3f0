"""Dataset benchmarks through the CLI, as a user runs them: `gym eval run` on a JSONL, Parquet and
CSV file, a Hub dataset (a local cache, read offline) and NeMo Gym rows with tools and
function-call matching; then `gym eval reverify`, `gym export` / `gym import`, and a comparison
of two runs whose rows differ. One `gym eval run` per format, all on the suite's Prefect server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gymflow.environments.registry import PATH_VARIABLE
from gymflow.store.tool_lists import expanded
from tests.environments.test_dataset import (
    MAPPED,
    ROWS,
    write_benchmark,
    write_hub_cache,
    write_rows,
)
from tests.faults.stores import run_gym

REPEATS = 2


def _run(root: Path, name: str, api: str, out: Path, **env: str) -> duckdb.DuckDBPyConnection:
    result = run_gym(
        *("eval", "run", "--benchmark", name, "--repeats", str(REPEATS), "--out", str(out)),
        cwd=root, prefect_api=api, env={PATH_VARIABLE: str(root), **env},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return duckdb.connect(str(out / "gymflow.duckdb"), read_only=True)


def _check_store(con: duckdb.DuckDBPyConnection, name: str, tasks: int) -> dict[str, Any]:
    """Every rollout of every task ran and was verified (passing or not, never an error)."""
    run = con.execute(
        "SELECT benchmark, environment, benchmark_version, dataset_version FROM runs"
    ).fetchone()
    assert run[:2] == (name, name)
    assert run[2].split(".")[1] == run[3]  # the rows' hash is part of the benchmark version
    counts = con.execute(
        """SELECT count(DISTINCT r.task_id), count(*), count(*) FILTER (WHERE v.status = 'ok'),
                  count(*) FILTER (WHERE v.passed)
           FROM rollouts r JOIN verifications v USING (rollout_id)"""
    ).fetchone()
    assert counts[:3] == (tasks, tasks * REPEATS, tasks * REPEATS)
    assert counts[3] > 0
    return {"benchmark_version": run[2], "dataset_version": run[3]}


def _data(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    rows = con.execute("SELECT task_id, data_json, tags FROM tasks ORDER BY task_id").fetchall()
    return {task_id: (json.loads(data), list(tags)) for task_id, data, tags in rows}


@pytest.mark.parametrize("source", ["parquet", "csv", "hub"])
def test_file_formats_and_the_hub_run_end_to_end(tmp_path: Path, prefect_api: str, source):
    env = {}
    if source == "hub":
        home = tmp_path / "hf-home"
        write_hub_cache(home, "acme/sums", ROWS)
        env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        dataset = {"hub": {"name": "acme/sums", "revision": "main"}, "fields": MAPPED}
    else:
        write_rows(tmp_path / "benchmarks" / f"sums.{source}", ROWS)
        dataset = {"path": f"sums.{source}", "fields": MAPPED}
    write_benchmark(tmp_path, "sums", dataset)
    con = _run(tmp_path, "sums", prefect_api, tmp_path / "run", **env)
    _check_store(con, "sums", tasks=3)
    # CSV's text "42" reaches the verifier as the number 42, as from the typed formats
    assert _data(con)["q2"] == ({"answer": 42}, ["mul"])


NEMO_ROWS = [
    {
        "task_id": f"weather-{i}",
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "Use the tools when they help."},
                {"role": "user", "content": question},
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "description": "Current weather in a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string"},
                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                        },
                        "required": ["city"],
                    },
                }
            ],
        },
        "category": category,
        "functions": [
            {
                "name": "get_weather",
                "description": "Current weather in a city.",
                "parameters": {
                    "type": "dict",
                    "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        "ground_truth": truth,
    }
    for i, (question, category, truth) in enumerate(
        [
            ("What's the weather in Paris?", "simple", [{"get_weather": {"city": ["Paris"]}}]),
            (
                "Is it cold in Oslo, in celsius?",
                "simple",
                [{"get_weather": {"city": ["Oslo"], "unit": ["celsius"]}}],
            ),
            ("Write me a haiku about tea.", "irrelevance", []),
            ("Weather in Lima, please.", "simple", [{"get_weather": {"city": ["Lima"]}}]),
        ]
    )
]


def test_nemo_gym_rows_run_as_they_are(tmp_path: Path, prefect_api: str) -> None:
    write_rows(tmp_path / "benchmarks" / "weather.jsonl", NEMO_ROWS)
    dataset = {"path": "weather.jsonl", "format": "nemo_gym", "fields": {"id": "task_id"}}
    write_benchmark(tmp_path, "weather", dataset, verifier={"name": "bfcl"}, prompt_template=None)
    con = _run(tmp_path, "weather", prefect_api, tmp_path / "run")
    _check_store(con, "weather", tasks=4)
    # The row's own messages opened the rollout, and its tools were offered.
    trajectory, request = con.execute(
        f"""SELECT r.trajectory_json, {expanded("c.request_json")} FROM rollouts r
           JOIN model_calls c USING (rollout_id) WHERE r.task_id = 'weather-0' LIMIT 1"""
    ).fetchone()
    first = json.loads(trajectory)[:2]
    assert [(m["role"], m["content"]) for m in first] == [
        ("system", "Use the tools when they help."),
        ("user", "What's the weather in Paris?"),
    ]
    assert [t["name"] for t in json.loads(request)["tools"]] == ["get_weather"]
    reasons = {
        json.loads(d)["reason"]
        for (d,) in con.execute("SELECT details_json FROM verifications").fetchall()
    }
    assert "match" in reasons  # function calls were made and matched


def test_reverify_export_import_and_a_dataset_version_comparison(
    tmp_path: Path,
    prefect_api: str,
) -> None:
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    write_rows(root_a / "benchmarks" / "sums.jsonl", ROWS)
    write_benchmark(root_a, "sums", {"path": "sums.jsonl", "fields": MAPPED})
    run_a = tmp_path / "run-a"
    con = _run(root_a, "sums", prefect_api, run_a)
    before = _check_store(con, "sums", tasks=3)
    con.close()

    def gym_ok(*args: str, as_json: bool = True) -> Any:
        result = run_gym(*args, *(["--json"] if as_json else []), cwd=tmp_path,
                         prefect_api=prefect_api, env={PATH_VARIABLE: str(root_a)})  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout) if as_json else result.stdout

    reverified = gym_ok("eval", "reverify", str(run_a), "--set", "extract=last_number")
    assert reverified["environment"] == "sums" and reverified["status"] == "written"
    assert reverified["reverified"] == 3 * REPEATS

    exported = tmp_path / "exported.jsonl"
    gym_ok("export", str(run_a), "--format", "nemo-gym", "--out", str(exported), as_json=False)
    assert len(exported.read_text().splitlines()) == 3 * REPEATS
    imported = gym_ok(
        "import", "nemo-gym", str(exported), "--out", str(tmp_path / "imported"),
        "--environment", "sums",
    )  # fmt: skip
    assert imported["tasks"] == 3 and imported["rollouts"] == 3 * REPEATS
    again = gym_ok("eval", "reverify", str(tmp_path / "imported"), "--set", "extract=answer_line")
    assert again["status"] == "written" and again["reverified"] == 3 * REPEATS
    # the imported run found the dataset's verifier through the registry, and scored it all
    assert again["after"]["coverage"]["scored"] == 3 * REPEATS

    # The same benchmark over a file with one answer corrected: a new dataset version, and a
    # comparison that says that is what differs.
    write_rows(root_b / "benchmarks" / "sums.jsonl", [*ROWS[:2], {**ROWS[2], "answer": 100}])
    write_benchmark(root_b, "sums", {"path": "sums.jsonl", "fields": MAPPED})
    con = _run(root_b, "sums", prefect_api, tmp_path / "run-b")
    after = _check_store(con, "sums", tasks=3)
    con.close()
    assert after["dataset_version"] != before["dataset_version"]
    compared = gym_ok("eval", "profile", str(run_a), "--compare", str(tmp_path / "run-b"))
    factors = {f["factor"]: (f["a"], f["b"]) for f in compared["factors"]}
    assert factors["dataset version"] == (before["dataset_version"], after["dataset_version"])
