"""A selection written as a dataset: NeMo Gym dataset rows (JSONL), optionally Parquet, and a
dataset benchmark YAML naming the JSONL, so the selected tasks can be evaluated again. The files
go to `OUT/benchmarks/`, the layout the registry searches: with `GYMFLOW_BENCHMARKS_PATH=OUT`
(benchmark files only: OUT is often a run folder, and nothing in it is imported as code),
`gym eval run --benchmark NAME` runs the selection.

A row is the task's first recorded request (`responses_create_params`: its input items, and the
function tools offered, when any), the task's verifier data at the top level (as NeMo Gym rows
carry `expected_answer` and the like), and under `_gymflow` its id, tags, difficulty, reference
and how the run did on it (n, c, pass_rate, bucket)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gymflow.core.config import Sampling
from gymflow.core.written import own_folder, written
from gymflow.data.lines import copy_to, make_folder, write_lines
from gymflow.data.provenance import parquet_metadata_sql, sidecar_path, sidecar_text
from gymflow.data.select import Selection
from gymflow.store.queries.selections import SELECTION_JSONL, SELECTION_PARQUET, data_keys
from gymflow.store.runs import run_info
from gymflow.store.verifier_versions import version_record


@dataclass(frozen=True, slots=True)
class Written:
    rows: int
    paths: dict[str, str]


def write_selection(
    con,
    selection: Selection,
    out_dir: Path,
    name: str,
    record: dict[str, Any],
    *,
    parquet: bool = False,
) -> Written:
    """Write, in `out_dir/benchmarks/`, `NAME.jsonl` (NeMo Gym rows) with `NAME.meta.json`,
    `NAME.yaml` (a benchmark over the JSONL) and with `parquet`, `NAME.parquet` carrying the
    provenance in its metadata.

    Expects `select_tasks` to have run on `con` (it leaves `data_selected`). The files take
    their names together once all are written: a failure (a full disk cut the JSONL mid-line
    beside the old YAML) leaves the previous selection whole."""
    out_dir = make_folder(own_folder(out_dir, "benchmarks"))
    paths = {"benchmark": out_dir / f"{name}.yaml", "jsonl": out_dir / f"{name}.jsonl"}
    paths["meta"] = sidecar_path(paths["jsonl"])
    if parquet:
        paths["parquet"] = out_dir / f"{name}.parquet"
    keys = data_keys(con)
    verifier = _verifier(con, selection)
    benchmark = benchmark_yaml(name, paths["jsonl"].name, record, verifier, keys)
    with written(*paths.values()) as partials:
        staged = dict(zip(paths, partials, strict=True))
        rows = write_lines(con, SELECTION_JSONL, [], staged["jsonl"])
        staged["meta"].write_text(sidecar_text(record), encoding="utf-8")
        if parquet:
            sql_options = f"FORMAT parquet, {parquet_metadata_sql(record)}"
            copy_to(con, SELECTION_PARQUET, staged["parquet"], sql_options)
        staged["benchmark"].write_text(yaml.safe_dump(benchmark, sort_keys=False), "utf-8")
    return Written(rows, {kind: str(path) for kind, path in paths.items()})


def _verifier(con, selection: Selection) -> dict[str, Any]:
    name, params, _ = version_record(con, selection.verifier_version)
    run = run_info(con)
    repeats, sampling, harness = run.repeats, run.sampling_json, run.harness
    return {
        "name": name,
        "params": json.loads(params or "{}"),
        "repeats": repeats,
        "sampling": {
            k: v
            for k, v in json.loads(sampling or "{}").items()
            if k in Sampling.model_fields and v is not None
        },
        "harness": harness,
    }


def benchmark_yaml(
    name: str,
    jsonl_name: str,
    record: dict[str, Any],
    verifier: dict[str, Any],
    data_keys: list[str],
) -> dict[str, Any]:
    """The benchmark YAML (as a dict) that evaluates the selection again: a dataset benchmark
    over NeMo Gym rows, with the run's verifier, harness, repeats and sampling.

    The one place that knows that format: adjust here if it changes."""
    run = record["run"]
    return {
        "name": name,
        "description": (
            f"{record['counts']['kept']} tasks selected from run {run['run_id']} "
            f"({run['benchmark'] or run['environment']}, {run['model']}) under verifier "
            f"{record['verifier_version']}"
        ),
        "dataset": {
            "path": jsonl_name,
            "format": "nemo_gym",
            "fields": {
                "id": "_gymflow.task_id",
                "tags": "_gymflow.tags",
                "difficulty": "_gymflow.difficulty",
                "reference": "_gymflow.reference",
                "verifier": data_keys,
            },
            "harness": verifier["harness"],
        },
        "verifier": {"name": verifier["name"], "params": verifier["params"]},
        "repeats": verifier["repeats"],
        "sampling": verifier["sampling"],
        "tags": ["selection"],
    }
