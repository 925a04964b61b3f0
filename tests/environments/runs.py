"""Running a shipped benchmark end to end, as a user would, for the environment tests."""

from __future__ import annotations

from pathlib import Path

import duckdb

from tests.conftest import gym


def run_benchmark(
    tmp_path: Path,
    benchmark: str,
    environment: str,
    *,
    limit: int,
    repeats: int,
    prefect_api: str,
) -> duckdb.DuckDBPyConnection:
    """`gym eval run --benchmark B --limit N --repeats R` with the local policy, on the suite's
    Prefect server; its store, open read-only, after checking the run it records."""
    out = tmp_path / "run"
    gym(
        *("eval", "run", "--benchmark", benchmark, "--limit", str(limit)),
        *("--repeats", str(repeats), "--out", str(out)),
        cwd=tmp_path,
        env={"PREFECT_API_URL": prefect_api},
        check=True,
    )
    con = duckdb.connect(str(out / "gymflow.duckdb"), read_only=True)
    assert con.execute("SELECT benchmark, environment, repeats FROM runs").fetchall() == [
        (benchmark, environment, repeats)
    ]
    return con
