"""Record the real-model runs as fixtures: `python -m tests.real_model.record [NAME ...]`.

Starts llama.cpp's server (and LiteLLM's proxy when a run goes through it) as the tests do, runs
each plan of tests/real_model/plans.py with `gym eval run`, and keeps each run's store under
tests/fixtures/real_model/NAME/ as `gymflow.duckdb.gz`: copied into a file of 16 KB blocks
(DuckDB's default 256 KB blocks make a 12-rollout store 4 MB) and gzipped, about 20 KB. A
decision scenario's folder also gets `scenario.yaml` (name, broken, expected, store), the form
bench/decide.py reads. Prints the agreement table of the runs with a reference checker.

Set PREFECT_API_URL to a running server (`gym server --start`) to skip each run's ephemeral one."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.real_model import references
from tests.real_model.plans import ALL, FIXTURES, Plan, by_name, scenario

STORE = "gymflow.duckdb.gz"


def small_copy(run_dir: Path, target: Path) -> None:
    """The run's store as a gzipped DuckDB file of 16 KB blocks."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "gymflow.duckdb"
        con = duckdb.connect()
        con.execute(f"ATTACH '{run_dir / 'gymflow.duckdb'}' AS source (READ_ONLY)")
        con.execute(f"ATTACH '{copy}' AS small (BLOCK_SIZE 16384)")
        con.execute("COPY FROM DATABASE source TO small")
        con.close()
        target.mkdir(parents=True, exist_ok=True)
        # mtime 0: recording the same store twice gives the same bytes
        with copy.open("rb") as raw, gzip.GzipFile(target / STORE, "wb", mtime=0) as packed:
            shutil.copyfileobj(raw, packed)


def unpack(folder: Path, run_dir: Path) -> Path:
    """A recorded fixture's store unpacked as the run directory `run_dir` (returned)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / STORE, "rb") as packed, (run_dir / "gymflow.duckdb").open("wb") as raw:
        shutil.copyfileobj(packed, raw)
    return run_dir


def manifest(plan: Plan) -> dict[str, str] | None:
    """The scenario.yaml bench/decide.py reads, with why the decision misses it where known."""
    known = scenario(plan)
    if known is None:
        return None
    broken, expected = known
    spec = {"name": plan.name, "broken": broken, "expected": expected, "store": STORE}
    return spec | ({"known_miss": plan.known_miss} if plan.known_miss else {})


def record(plan: Plan, base_url: str, folder: Path, agreements: list) -> bool:
    """Run `plan` against `base_url` and keep its store (and scenario.yaml) as a fixture;
    False when the run failed."""
    from tests.real_model.conftest import eval_run

    started = time.monotonic()
    run = eval_run(plan, base_url, folder, os.environ.get("PREFECT_API_URL"))
    print(f"{plan.name}: exit {run.result.returncode}, {time.monotonic() - started:.0f} s",
          flush=True)  # fmt: skip
    if run.result.returncode != 0:
        print(run.result.stdout[-3000:], run.result.stderr[-3000:], file=sys.stderr)
        return False
    target = FIXTURES / plan.name
    small_copy(run.run_dir, target)
    spec = manifest(plan)
    if spec is not None:
        (target / "scenario.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    if plan.name in references.CHECKERS:
        agreements += references.compare(plan.name, references.scored_rollouts(run.run_dir))
    return True


def main(argv: list[str] | None = None) -> int:
    from tests.real_model.conftest import serve_litellm, serve_llama

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="plans to record (default: all)")
    args = parser.parse_args(argv)
    plans = [by_name(name) for name in args.names] or list(ALL)

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        agreements: list = []
        # plans sorted by server: each server started once, one at a time (two cores)
        for server in dict.fromkeys(plan.server for plan in plans):
            with contextlib.ExitStack() as stack:
                llama = stack.enter_context(serve_llama(folder, server))
                proxy = None
                for plan in (p for p in plans if p.server == server):
                    if plan.via == "litellm" and proxy is None:
                        proxy = stack.enter_context(serve_litellm(llama, folder))
                    if not record(plan, llama if plan.via == "chat" else proxy, folder, agreements):
                        return 1
        print(references.table(agreements))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except pytest.skip.Exception as exc:  # a venv missing: say which, as the tests do
        sys.exit(str(exc))
