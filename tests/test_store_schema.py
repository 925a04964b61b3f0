"""The store's schema is declared once (`store/schema.py`): the tables a store holds, the column
order the writers insert in and the row builders all follow that one declaration, and a store
written before a column or table existed still opens."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from gymflow.core.records import ModelCall, Verification
from gymflow.store.db import StoreError, connect, store_path
from gymflow.store.rows import model_call_row, rollout_row, row, verification_row
from gymflow.store.schema import COLUMNS, SPECS
from gymflow.store.tool_lists import ToolLists
from gymflow.store.writer import VERDICT_COLUMNS


def _columns(con, table: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        "WHERE table_name = ? AND database_name = current_database() ORDER BY column_index",
        [table],
    ).fetchall()


def test_a_new_store_has_every_declared_table_with_its_columns_in_order(tmp_path):
    con = connect(tmp_path / "run", create=True)
    try:
        for spec in SPECS:
            assert _columns(con, spec.name) == [(c.name, c.type) for c in spec.columns]
            assert COLUMNS[spec.name] == spec.column_names
        keys = dict(
            con.execute(
                "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
                "WHERE constraint_type = 'PRIMARY KEY'"
            ).fetchall()
        )
        assert keys == {spec.name: list(spec.key) for spec in SPECS if spec.key}
    finally:
        con.close()


def test_a_store_written_before_a_column_and_a_table_existed_opens(tmp_path):
    con = connect(tmp_path / "run", create=True)
    con.execute("ALTER TABLE verifier_versions DROP COLUMN code_hash")
    con.execute("DROP TABLE tool_lists")
    con.close()

    reader = connect(tmp_path / "run", read_only=True)  # what a report or a profile opens
    try:
        assert reader.execute("SELECT count(*) FROM tool_lists").fetchone() == (0,)
    finally:
        reader.close()
    writer = connect(tmp_path / "run")
    try:
        assert [name for name, _ in _columns(writer, "verifier_versions")][-1] == "code_hash"
        assert writer.execute("SELECT count(*) FROM main.tool_lists").fetchone() == (0,)
    finally:
        writer.close()


def test_a_row_naming_a_column_its_table_lacks_is_refused():
    assert row("shards", {"run_id": "r", "shard_index": 0}) == ("r", 0, None)
    with pytest.raises(KeyError, match="shards has no column shard"):
        row("shards", {"run_id": "r", "shard": 0})


def _same(value):
    return value


def test_the_builders_of_the_collectors_rows_follow_the_schemas_column_order():
    """Each argument is given as the name of the column it fills: the row must read back as the
    table's column names, in order (times absent: no times and no latency)."""
    rollout = rollout_row(
        **{
            name: name
            for name in COLUMNS["rollouts"]
            if not name.endswith(("_json", "_at")) and name != "latency_s"
        },
        trajectory="trajectory_json",
        counters="counters_json",
        started_at=None,
        finished_at=None,
        json_of=_same,
    )
    assert rollout == tuple(
        None if name in ("latency_s", "started_at", "finished_at") else name
        for name in COLUMNS["rollouts"]
    )
    call = ModelCall(
        **{
            name: name
            for name in COLUMNS["model_calls"]
            if name not in ("rollout_id",) and not name.endswith("_json")
        },
        sampling="sampling_json",
        request="request_json",
        response="response_json",
    )
    assert model_call_row("rollout_id", call, ToolLists(), json_of=_same) == COLUMNS["model_calls"]
    verdict = Verification(
        "verifier_version", "status", "reward", "passed", "failure_kind", "details_json"
    )
    created_at = datetime(2026, 1, 1)
    assert verification_row("rollout_id", verdict, created_at, json_of=_same) == (
        *VERDICT_COLUMNS[:-1],
        created_at,
    )
    assert VERDICT_COLUMNS[-1] == "created_at"
    # the seal is never given: every writer computes it in SQL (store/seal.py)
    assert set(COLUMNS["verifications"]) - set(VERDICT_COLUMNS) == {"seal"}


def test_a_store_records_the_duckdb_that_wrote_it(tmp_path):
    import duckdb

    from gymflow.store.db import connect

    connect(tmp_path, create=True).close()
    con = connect(tmp_path, read_only=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'duckdb_version'").fetchone()
    finally:
        con.close()
    assert row == (duckdb.__version__,)


def test_the_store_just_made_is_not_checked_again_but_every_later_open_is(tmp_path, monkeypatch):
    """`connect(create=True)` opens the file it just built from gymflow's schema without the
    checks for a file from anyone; any later open of it, or a store already there, is checked."""
    import gymflow.store.db as db

    checked = []
    check = db._refuse_foreign_objects
    monkeypatch.setattr(db, "_refuse_foreign_objects", lambda *a: checked.append(a) or check(*a))
    connect(tmp_path / "run", create=True).close()
    assert checked == []
    for read_only in (False, True):
        connect(tmp_path / "run", create=True, read_only=read_only).close()
    assert len(checked) == 2
    con = connect(tmp_path / "run", read_only=True)
    try:
        assert db.differences(con) == []
        assert con.execute(db._FOREIGN_OBJECTS, [[s.name for s in SPECS]]).fetchall() == []
    finally:
        con.close()


def test_a_store_with_a_trigger_is_refused_before_its_trigger_runs(tmp_path):
    """DuckDB 2 keeps a trigger in the file: one on `rollouts` would rewrite every verdict
    passed in the next write of gymflow's. Readers and writers refuse the store, naming it."""
    run = tmp_path / "run"
    connect(run, create=True).close()
    raw = duckdb.connect(str(store_path(run)))
    try:
        raw.execute(
            "CREATE TRIGGER passes AFTER INSERT ON rollouts FOR EACH STATEMENT "
            "UPDATE verifications SET reward = 1.0, passed = true"
        )
    finally:
        raw.close()
    before = store_path(run).read_bytes()
    for read_only in (True, False):
        with pytest.raises(StoreError, match=r"did not create \(trigger 'passes'\)"):
            connect(run, read_only=read_only)
    assert store_path(run).read_bytes() == before
