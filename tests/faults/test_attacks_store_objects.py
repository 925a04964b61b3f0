"""A store holding objects gymflow did not create. A DuckDB file keeps macros, views, sequences,
tables and (DuckDB 2) triggers of its own: `CREATE MACRO sum(x) AS count(x)` replaced DuckDB's
`sum` in gymflow's SQL. Read-only connections resolved DuckDB's functions first, but the writers
(the collector, reverify, merge) did not, a view over a local file read that file wherever the
store was opened, and a trigger runs in gymflow's own writes. Now every connection kind refuses
such a store before any of gymflow's SQL runs on it, with one line naming the store and each
object, and nothing stored changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.conftest import gym
from tests.faults.stores import collect_run, one_error_line, run_gym, tree_digest

#: Objects a store can hold, and how the refusal names each.
OBJECTS = [
    ("CREATE MACRO sum(x) AS count(x)", "macro 'sum'"),
    ("CREATE MACRO abs(x) AS 0", "macro 'abs'"),
    ("CREATE MACRO list(x) AS 42", "macro 'list'"),
    ("CREATE MACRO max(x) AS 1", "macro 'max'"),
    ("CREATE MACRO json_extract(j, p) AS '1'", "macro 'json_extract'"),
    ("CREATE MACRO current_database() AS 'elsewhere'", "macro 'current_database'"),
    ("CREATE MACRO duckdb_functions() AS TABLE SELECT 1 AS x", "table macro 'duckdb_functions'"),
    ("CREATE MACRO read_parquet(p) AS TABLE SELECT 1 AS x", "table macro 'read_parquet'"),
    ("CREATE VIEW notes AS SELECT * FROM read_text('/etc/hostname')", "view 'notes'"),
    ("CREATE SEQUENCE ids", "sequence 'ids'"),
    ("CREATE TYPE mood AS ENUM ('ok')", "type 'mood'"),
    ("CREATE TABLE extra (x INTEGER)", "table 'extra'"),
    # the check's own functions, redefined to hide what it looks for
    (
        "CREATE MACRO list_contains(l, x) AS true; CREATE TABLE hidden (x INTEGER)",
        "table 'hidden'",
    ),
    ("CREATE INDEX by_task ON rollouts (task_id)", "index 'by_task'"),
    (
        "CREATE TRIGGER passes AFTER INSERT ON rollouts FOR EACH STATEMENT "
        "UPDATE verifications SET reward = 1.0, passed = true",
        "trigger 'passes'",
    ),
    ("CREATE SCHEMA side; CREATE TABLE side.rollouts (x INTEGER)", "table 'side.rollouts'"),
]


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("clean") / "run")


def _edited(clean: Path, folder: Path, sql: str) -> Path:
    run = folder / "run"
    shutil.copytree(clean, run)
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        con.execute(sql)
    finally:
        con.close()
    return run


def _refused(done, run: Path, named: str) -> None:
    line = one_error_line(done.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    assert str(run / "gymflow.duckdb") in line and named in line, line
    assert "did not create" in line


@pytest.mark.parametrize(("sql", "named"), OBJECTS, ids=[n for _, n in OBJECTS])
def test_a_store_with_objects_of_its_own_is_refused_by_readers_and_writers(
    clean: Path, tmp_path: Path, prefect_api: str, sql: str, named: str
) -> None:
    """A reader (`profile`) and a writer (`reverify`, which adds a verifier version) refuse it
    alike, the writer before it writes anything."""
    run = _edited(clean, tmp_path, sql)
    before = tree_digest(run)
    _refused(gym("eval", "profile", str(run), "--json", cwd=tmp_path), run, named)
    written = run_gym(
        "eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, prefect_api=prefect_api
    )
    _refused(written, run, named)
    assert tree_digest(run) == before


def test_every_connection_kind_refuses_a_store_s_macro(
    clean: Path, tmp_path: Path, prefect_api: str
) -> None:
    """The collector (a resumed run), merge (the store as a shard, and as the store merged
    into), and the readers, on a store whose `sum` is `count`; the unedited store passes the
    readers."""
    run = _edited(clean, tmp_path, "CREATE MACRO sum(x) AS count(x)")
    config = tmp_path / "eval.yaml"
    config.write_text(
        yaml.safe_dump({"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2, "out": str(run)})
    )
    merged = tmp_path / "merged"
    gym("eval", "aggregate", str(clean), "--out", str(merged), cwd=tmp_path, check=True)
    before, merged_before = tree_digest(run), tree_digest(merged)
    commands = [
        ("eval", "health", str(run), "--json"),
        ("eval", "diagnose", str(run), "--json"),
        ("eval", "reverify", str(run), "--check", "--json"),
        ("eval", "run", str(config), "--resume"),
        ("eval", "aggregate", str(run), "--out", str(merged)),
        ("eval", "aggregate", str(clean), "--out", str(run)),
    ]
    for command in commands:
        _refused(run_gym(*command, cwd=tmp_path, prefect_api=prefect_api), run, "macro 'sum'")
    assert tree_digest(run) == before and tree_digest(merged) == merged_before
    for command in commands[:3]:
        same = [str(clean) if part == str(run) else part for part in command]
        assert gym(*same, cwd=tmp_path).returncode == 0
