"""`gym eval run` on the multi-turn ledger environment with tool_loop, faults, reasoning and an API
key: what the store holds, and that the key is nowhere in it, the report or the output."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import LedgerRun


@pytest.fixture(scope="module")
def run(ledger_run: LedgerRun):
    """The suite's ledger run (tests/conftest.py: tool loop, faults, reasoning, an API key)."""
    con = duckdb.connect(str(ledger_run.run_dir / "gymflow.duckdb"), read_only=True)
    yield ledger_run.cwd, ledger_run.key, ledger_run.result, con
    con.close()


def test_rollouts_carry_tool_loop_counters(run) -> None:
    _, _, _, con = run
    rows = con.execute("SELECT status, num_turns, counters_json FROM rollouts").fetchall()
    assert len(rows) == 48
    counters = [json.loads(c) for _, _, c in rows]
    assert all(c["tool_calls"] >= 0 for c in counters)
    assert sum(c["malformed_tool_calls"] for c in counters) > 0, "skill < 1 makes malformed calls"
    capped = [(t, c) for (_, t, _), c in zip(rows, counters, strict=True) if c["max_turns_reached"]]
    assert capped and all(turns == 3 for turns, _ in capped)
    # A rollout stopped by max_turns is still verified: an outcome, not a failure.
    unverified = con.execute(
        """SELECT count(*) FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
           WHERE r.status = 'completed' AND v.rollout_id IS NULL"""
    ).fetchone()[0]
    assert unverified == 0


def test_model_calls_are_evidence(run) -> None:
    _, _, _, con = run
    kinds = dict(
        con.execute(
            "SELECT coalesce(failure_kind, status), count(*) FROM model_calls GROUP BY 1"
        ).fetchall()
    )
    assert kinds.get("rate_limited", 0) > 0 and kinds.get("transport_error", 0) > 0
    assert kinds.get("completed", 0) > 0
    sampling = con.execute("SELECT DISTINCT sampling_json FROM model_calls").fetchall()
    assert len(sampling) > 1  # the seed differs per rollout; the rest is fixed
    assert all(json.loads(s)["reasoning"] == {"effort": "low"} for (s,) in sampling)
    reasoning = con.execute(
        "SELECT sum(reasoning_tokens) FROM model_calls WHERE status = 'completed'"
    ).fetchone()[0]
    assert reasoning > 0
    trajectory = con.execute("SELECT trajectory_json FROM rollouts LIMIT 1").fetchone()[0]
    assert '"type":"reasoning"' in trajectory


def test_api_key_is_nowhere(run) -> None:
    cwd, key, result, con = run
    assert key not in result.stdout + result.stderr
    columns = con.execute(
        """SELECT table_name, column_name FROM information_schema.columns
           WHERE data_type LIKE 'VARCHAR%' OR data_type = 'JSON'"""
    ).fetchall()
    assert len(columns) > 20
    for table, column in columns:
        hits = con.execute(
            f'SELECT count(*) FROM "{table}" WHERE "{column}"::VARCHAR LIKE ?', [f"%{key}%"]
        ).fetchone()[0]
        assert hits == 0, f"API key found in {table}.{column}"
    files = [p for p in Path(cwd).rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in files)
    for path in files:
        assert key.encode() not in path.read_bytes(), f"API key found in {path}"
