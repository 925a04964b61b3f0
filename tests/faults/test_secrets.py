"""An API key in the environment (model.api_key_env; the client sends it as a bearer header, even to
the local server) appears nowhere else: not in the store, the report, gym's output (at DEBUG log
level), Prefect's artifacts, logs, flow and task runs, or its result files."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import httpx

from tests.faults.stores import run_gym

KEY = "sk-gymflow-FAKE-7f3a9c1e5b2d4a6f8e0c"
CONFIG = """\
benchmark: arithmetic-smoke
limit: 10
repeats: 2
model:
  api_key_env: GYMFLOW_FAULTS_API_KEY
out: {out}
"""


def _text_columns_holding(store: Path, needle: str) -> list[str]:
    """Every (table.column) of text whose values contain `needle`: DuckDB compresses strings, so
    the file's bytes alone cannot prove absence."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        columns = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type = 'VARCHAR' OR data_type LIKE '%[]'"
        ).fetchall()
        return [
            f"{table}.{column}"
            for table, column in columns
            if con.execute(
                f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ?',
                [f"%{needle}%"],
            ).fetchone()[0]
        ]
    finally:
        con.close()


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_api_key_reaches_nothing_stored_logged_or_published(tmp_path: Path, prefect_api: str):
    config = tmp_path / "keyed.yaml"
    config.write_text(CONFIG.format(out=tmp_path / "run"))
    env = {"GYMFLOW_FAULTS_API_KEY": KEY, "PREFECT_LOGGING_LEVEL": "DEBUG"}
    result = run_gym("eval", "run", str(config), cwd=tmp_path, prefect_api=prefect_api, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    store = tmp_path / "run" / "gymflow.duckdb"
    assert (tmp_path / "run" / "report.html").exists()

    assert KEY not in result.stdout + result.stderr
    assert _text_columns_holding(store, KEY) == []
    assert _text_columns_holding(store, "GYMFLOW_FAULTS_API_KEY") == ["runs.config_json"]
    assert _files_holding(tmp_path / "run", KEY.encode()) == []
    assert _files_holding(Path(os.environ["PREFECT_HOME"]), KEY.encode()) == []

    with httpx.Client(base_url=prefect_api, timeout=30) as api:
        published = {
            endpoint: api.post(f"/{endpoint}/filter", json={"limit": 200}).raise_for_status().text
            for endpoint in ("artifacts", "logs", "flow_runs", "task_runs")
        }
    assert "gymflow-report" in published["artifacts"], "the run published its artifacts"
    for endpoint, text in published.items():
        assert KEY not in text, f"the key leaked into Prefect's {endpoint}"
