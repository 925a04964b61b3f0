"""Loading and validating a dataset benchmark of many rows: a JSONL file of N grade-school style
questions with numeric answers, written to a temporary folder with its benchmark YAML.

Each stage runs in a fresh process, so no cache is shared between them:
- `load`: read, map and type-check every row (`DatasetEnvironment.load`: orjson per line, the
  field mapping, the verifier's field kinds, content hashes of the rows);
- `plan`: the run plan (`resolve`): load, every row rendered through the prompt template, the
  benchmark version with the rows' hash;
- `validate`: `gym env validate` in-process (`validate_config`): the above plus the first row's
  preview, the simulated policy's coverage, the harness and the resources server's /health.
Also prints each stage's CPU seconds (what load on a shared machine does not change), the wall
time per row and the process's peak RSS. Imports are timed too (about 0.6 s of each stage).

    python bench/dataset_load.py [--rows 100000] [--format jsonl|csv|parquet]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path

import tiny
import yaml

BENCHMARK = "bench-rows"


def write(folder: Path, rows: int, fmt: str) -> Path:
    data = folder / "benchmarks" / f"rows.{fmt}"
    data.parent.mkdir(parents=True)
    records = [
        {
            "id": f"row-{i:06d}",
            "question": f"A crate holds {i % 97 + 3} boxes of {i % 13 + 2} pears. How many pears?",
            "answer": (i % 97 + 3) * (i % 13 + 2),
            "topic": ("multiplication", "word-problem")[i % 2],
            "level": ("easy", "medium", "hard")[i % 3],
        }
        for i in range(rows)
    ]
    if fmt == "jsonl":
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        import pyarrow as pa
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(records)
        pq.write_table(table, data) if fmt == "parquet" else pcsv.write_csv(table, data)
    (folder / "benchmarks" / f"{BENCHMARK}.yaml").write_text(
        yaml.safe_dump(
            {
                "name": BENCHMARK,
                "dataset": {
                    "path": data.name,
                    "fields": {
                        "id": "id",
                        "prompt": ["question"],
                        "verifier": {"answer": "answer"},
                        "tags": "topic",
                        "difficulty": "level",
                    },
                },
                "verifier": {"name": "numeric_match"},
                "prompt_template": "{{ question }}\n\nAnswer: <number>",
            }
        )
    )
    config = folder / "eval.yaml"
    config.write_text(f"benchmark: {BENCHMARK}\nout: {folder / 'runs'}\n")
    return config


def _stage(stage: str, config: str, queue: multiprocessing.Queue) -> None:
    from gymflow.core.config import EvalConfig

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    start, start_cpu = time.perf_counter(), cpu()
    if stage == "load":
        from gymflow.environments.registry import load_environment

        loaded = load_environment(BENCHMARK).load()
        detail = f"{len(loaded.tasks)} tasks, {len(loaded.problems)} problems"
    elif stage == "plan":
        from gymflow.rollouts.plan import resolve

        plan = resolve(EvalConfig(benchmark=BENCHMARK, out="unused"))
        detail = f"version {plan.benchmark_version}"
    else:
        from gymflow.rollouts.validate import validate_config

        report = validate_config(Path(config))
        detail = "valid" if report.ok else f"{len(report.problems)} problems"
    elapsed, cpu_s = time.perf_counter() - start, cpu() - start_cpu
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((elapsed, cpu_s, rss_mb, detail))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--format", choices=("jsonl", "csv", "parquet"), default="jsonl")
    args = tiny.parse(parser, rows=300)
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-dataset-") as tmp:
        folder = Path(tmp)
        config = write(folder, args.rows, args.format)
        size_mb = sum(p.stat().st_size for p in (folder / "benchmarks").iterdir()) / 1e6
        os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = str(folder)
        print(f"{args.rows:,} rows, {args.format}, {size_mb:.1f} MB")
        header = ("stage", "seconds", "CPU s", "us/row", "peak RSS MB")
        print("{:<10} {:>8} {:>8} {:>8} {:>12}  detail".format(*header))
        context = multiprocessing.get_context("spawn")
        for stage in ("load", "plan", "validate"):
            queue = context.Queue()
            process = context.Process(target=_stage, args=(stage, str(config), queue))
            process.start()
            elapsed, cpu_s, rss_mb, detail = queue.get()
            process.join()
            per_row = elapsed / args.rows * 1e6
            print(
                f"{stage:<10} {elapsed:>8.2f} {cpu_s:>8.2f} {per_row:>8.1f} {rss_mb:>12.0f}  "
                f"{detail}"
            )


if __name__ == "__main__":
    main()
