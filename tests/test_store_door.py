"""The store's tables behind one door: SQL naming a table of a run store (`gymflow.store.schema`)
is written only inside `gymflow.store`, in the schema and the query modules, so a column change
touches those and nothing else. A module outside the store that names a table in SQL fails here,
unless `ALLOWED` lists it with the reason it still does; the list only shrinks, and an entry no
longer needed fails too."""

from __future__ import annotations

import re
from pathlib import Path

from gymflow.store.schema import SPECS

SRC = Path(__file__).resolve().parents[1] / "src" / "gymflow"

#: Modules outside store/ that still name a table in SQL, with why: each to be emptied into
#: `gymflow.store.queries` (or shown not to be a run store's table).
ALLOWED: dict[str, str] = {
    # not a run store: the history catalog is a DuckDB file of its own whose one table (`runs`)
    # is declared and queried in that module alone
    "history/catalog.py": "the history catalog's own table, declared and queried there",
    "cli/runs.py": "prints the SQL a user runs on the history catalog (not a run store)",
    # owned by another branch (the seals): moved when it lands
    # not moved yet (issue 43): each names the SQL it still holds
    "analysis/health_checks.py": "every health check, one query each (stays in analysis/)",
}

_KEYWORDS = r"(?:FROM|JOIN|INTO|UPDATE|TABLE)"


def table_pattern() -> re.Pattern[str]:
    """SQL naming a table: an upper-case keyword that takes a table, then one of the store's
    table names (optionally schema-qualified), as a whole word."""
    names = "|".join(sorted((re.escape(spec.name) for spec in SPECS), key=len, reverse=True))
    return re.compile(rf"\b{_KEYWORDS}\s+(?:\w+\.)?({names})\b")


def modules_naming_a_table(root: Path = SRC) -> dict[str, list[str]]:
    """Module (path under src/gymflow) -> the tables its SQL names, for modules outside store/."""
    pattern = table_pattern()
    found = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module.startswith("store/"):
            continue
        tables = sorted(set(pattern.findall(path.read_text())))
        if tables:
            found[module] = tables
    return found


def test_no_module_outside_the_store_names_a_table():
    outside = modules_naming_a_table()
    unexplained = {module: tables for module, tables in outside.items() if module not in ALLOWED}
    assert not unexplained, (
        "SQL naming the store's tables outside gymflow.store (move it to a module of "
        f"gymflow.store.queries): {unexplained}"
    )


def test_every_allowance_is_still_needed():
    stale = sorted(set(ALLOWED) - set(modules_naming_a_table()))
    assert not stale, f"no longer naming a table, so delete from ALLOWED: {stale}"


def test_the_count_finds_sql_naming_a_table(tmp_path):
    """The scan finds a table named after each keyword, qualified or not, and passes over prose
    and the store's own modules."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "queries.py").write_text('SQL = "SELECT * FROM rollouts"\n')
    (tmp_path / "report.py").write_text(
        'A = "SELECT count(*) FROM main.rollouts r JOIN verifications v USING (rollout_id)"\n'
        'B = "INSERT INTO model_calls VALUES (?)"\n'
    )
    (tmp_path / "prose.py").write_text('"""Read from rollouts, joined to runs of tasks."""\n')
    assert modules_naming_a_table(tmp_path) == {
        "report.py": ["model_calls", "rollouts", "verifications"]
    }


def test_the_handle_owns_its_connection_and_the_queries_read_through_it(tmp_path):
    import duckdb
    import pytest

    from gymflow.store.handle import Store
    from gymflow.store.queries.rollouts import held_and_failed, stored_count, stored_ids
    from gymflow.store.queries.tasks import stored_tasks
    from gymflow.store.runs import config_json, has_run

    with Store.open(tmp_path, create=True) as store:
        assert store.path == tmp_path / "gymflow.duckdb" and not store.read_only
        assert (stored_count(store.con), stored_ids(store.con)) == (0, set())
        assert held_and_failed(store.con) == (0, 0)
        assert (has_run(store.con), config_json(store.con)) == (False, None)
        assert stored_tasks(store.con) == []
    with pytest.raises(duckdb.ConnectionException):
        store.con.execute("SELECT 1")
    with Store.open(tmp_path, read_only=True) as reader:
        assert reader.read_only and stored_count(reader.con) == 0
