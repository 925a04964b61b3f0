"""A store's persisted column statistics decide DuckDB's answers: it keeps each column's least
and greatest value in the file, per segment and for the table, and trusts them (the planner
folds a filter they rule out, a scan skips a segment its range excludes). Rewriting the
statistics of `verifications.status` from 'ok' to 'zz' (each block's checksum made right; no
row, seal or catalog object changed) opened in both modes, and `gym eval profile` scored none
of the run's verdicts (plain DuckDB reads `min(status)` 'zz' and no row `WHERE status = 'ok'`;
only the values themselves, `list(status)`, still read 'ok'). The seal check now compares every
column's statistics with its values (`store/column_statistics.py`): whichever record is forged,
the segment's, the table's or both, every command that reads or writes the store refuses it in
one line naming the file and the column, and nothing stored changes."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym_in_process as gym
from tests.faults.forged_statistics import forge_bounds, mark_max_exact
from tests.faults.stores import collect_run, copied_run, one_error_line, tree_digest


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collect_run(tmp_path_factory.mktemp("statistics") / "run")


def _statuses(store: Path) -> tuple[list[str], int]:
    """The stored statuses as their values read, and how many rows `status = 'ok'` finds."""
    raw = duckdb.connect(str(store), read_only=True)
    try:
        (statuses,) = raw.execute("SELECT list(status) FROM verifications").fetchone() or ([],)
        (seen,) = raw.execute(
            "SELECT count(*) FROM verifications WHERE status = 'ok'"
        ).fetchone() or (None,)
    finally:
        raw.close()
    return statuses, seen


def _judged_version(store: Path) -> str:
    """The verifier version the store's verdicts were judged under."""
    raw = duckdb.connect(str(store), read_only=True)
    try:
        (version,) = raw.execute("SELECT any_value(verifier_version) FROM verifications").fetchone()
    finally:
        raw.close()
    return version


COMMANDS = {
    "profile": ("eval", "profile", "{run}", "--json"),
    "health": ("eval", "health", "{run}"),
    "report": ("report", "{run}"),
    "reverify": ("eval", "reverify", "{run}", "--set", "extract=last_number"),
}


@pytest.mark.parametrize("records", ["both", "table", "segment"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_store_whose_statistics_were_forged_is_refused_naming_the_column(
    honest: Path, tmp_path: Path, records: str, command: str
) -> None:
    run = copied_run(honest, tmp_path / "run")
    store = run / "gymflow.duckdb"
    assert forge_bounds(store, ("ok", "ok"), ("zz", "zz"), records)
    statuses, seen = _statuses(store)
    assert set(statuses) == {"ok"}, statuses  # the values, and so the seals, are as written
    if records != "segment":
        assert seen == 0  # and the answers follow the forged statistics
    before = tree_digest(run)
    done = gym(*(part.format(run=run) for part in COMMANDS[command]), cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    line = one_error_line(done.stderr)
    assert str(store) in line and "verifications.status" in line, line
    assert "column statistics" in line, line
    assert tree_digest(run) == before


def test_the_same_store_before_the_forgery_is_read(honest: Path, tmp_path: Path) -> None:
    run = copied_run(honest, tmp_path / "run")
    statuses, _seen = _statuses(run / "gymflow.duckdb")
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["coverage"]["scored"] == len(statuses)


def test_a_greatest_value_flagged_whole_is_refused(honest: Path, tmp_path: Path) -> None:
    """The flag no listing shows (a string bound is the whole value, not its first 12 bytes) set
    on `verifications.verifier_version`: every filter on the version found no verdict, and
    `gym eval profile` scored 0 of 12 while the listed statistics read as before (attacker's
    pass over 7ffa519)."""
    run = copied_run(honest, tmp_path / "run")
    store = run / "gymflow.duckdb"
    version = _judged_version(store)
    flagged = mark_max_exact(store, version, version, followed_by=("ok", "ok"))
    assert len(version) > 12 and flagged == 2  # the verdicts' segment's record and table's
    before = tree_digest(run)
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    line = one_error_line(done.stderr)
    assert str(store) in line and "verifications.verifier_version" in line, line
    assert tree_digest(run) == before


def test_a_forged_version_lookup_is_refused_as_forged_statistics(
    honest: Path, tmp_path: Path
) -> None:
    """Every record of the verifier version's bounds flagged whole (its table's and the
    verdicts', the run's): `gym eval profile` looked the version up before the seal check
    and said the store held no such version (attacker's pass over 6a8be2e). The check now
    runs first, and the refusal names the forgery."""
    run = copied_run(honest, tmp_path / "run")
    store = run / "gymflow.duckdb"
    version = _judged_version(store)
    assert mark_max_exact(store, version, version) > 2
    before = tree_digest(run)
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    line = one_error_line(done.stderr)
    assert done.returncode == 1 and "column statistics" in line, line
    assert "no verifier version" not in line
    assert tree_digest(run) == before
