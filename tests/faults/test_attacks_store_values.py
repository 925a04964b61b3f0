"""A value no gymflow writes, read from a store (issue 42, second attacker's pass over 2a91e13,
a20): 10 edits ended 34 read commands in a traceback, "this is a gymflow bug", exit 3, and
`runs.repeats` of two billion made profile ask numpy for 44.7 GiB. Now each is one line naming
the store file, the table, the row and the field (exit 1, bad input), with nothing stored
changed (`store/stored_values.py`): the small tables are checked when the store opens, before
anything is sized from them; a value of the large tables DuckDB stops on is found and named.

In process: what is checked is the command's output and exit code, not its process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import gym_in_process
from tests.faults.stores import (
    collect_run,
    edit_store,
    one_error_line,
    query,
    rollout_rows,
    tree_digest,
)

ONE = "(SELECT rollout_id FROM rollouts ORDER BY rollout_id LIMIT 1)"
DEEP = "'{\"a\":' || repeat('[', 100000) || repeat(']', 100000) || '}'"
#: edit -> (its SQL, the table and field the error names)
EDITS = {
    "config not JSON": ("UPDATE runs SET config_json = '{not json'", "runs", "config_json"),
    "config a list": ("UPDATE runs SET config_json = '[1,2]'", "runs", "config_json"),
    "repeats huge": ("UPDATE runs SET repeats = 2000000000", "runs", "repeats"),
    "sampling not JSON": ("UPDATE runs SET sampling_json = 'x'", "runs", "sampling_json"),
    "params not JSON": (
        "UPDATE verifier_versions SET params_json = '{'",
        "verifier_versions",
        "params_json",
    ),
    "params a list": (
        "UPDATE verifier_versions SET params_json = '[1]'",
        "verifier_versions",
        "params_json",
    ),
    "schema version NULL": (
        "UPDATE meta SET value = NULL WHERE key = 'schema_version'",
        None,
        "schema version",
    ),
    "details not JSON": (
        f"UPDATE verifications SET details_json = '{{bad' WHERE rollout_id = {ONE}",
        "verifications",
        "details_json",
    ),
    "response not JSON": (
        f"UPDATE model_calls SET response_json = '{{' WHERE rollout_id = {ONE}",
        "model_calls",
        "response_json",
    ),
    # valid JSON Python's parser cannot read (RecursionError, not ValueError: attack pass 4, a04)
    "config nested deep": (f"UPDATE runs SET config_json = {DEEP}", "runs", "config_json"),
    "params nested deep": (
        f"UPDATE verifier_versions SET params_json = {DEEP}",
        "verifier_versions",
        "params_json",
    ),
    "details nested deep": (
        f"UPDATE verifications SET details_json = {DEEP} WHERE rollout_id = {ONE}",
        "verifications",
        "details_json",
    ),
    "trajectory nested deep": (  # reverify names it by its rollout ("rollout ID: trajectory_json")
        f"UPDATE rollouts SET trajectory_json = {DEEP} WHERE rollout_id = {ONE}",
        None,
        "trajectory_json",
    ),
    "latency NaN": (
        "UPDATE rollouts SET latency_s = 'nan'::DOUBLE",
        "rollouts",
        "latency_s",
    ),
}
COMMANDS = {
    "health": ("eval", "health", "{run}"),
    "profile": ("eval", "profile", "{run}"),
    "diagnose": ("eval", "diagnose", "{run}"),
    "report": ("report", "{run}"),
    "reverify --check": ("eval", "reverify", "{run}", "--check"),
}


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("values") / "run")


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_bad_stored_value_is_one_line_naming_it(honest: Path, tmp_path: Path, edit: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    sql, table, field = EDITS[edit]
    edit_store(run, sql)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    for name, words in COMMANDS.items():
        done = gym_in_process(*(str(run) if w == "{run}" else w for w in words), cwd=tmp_path)
        said = done.stdout + done.stderr
        assert "gymflow bug" not in said and "Traceback" not in said, (name, said)
        if done.returncode in (0, 2):  # never stopped on the value: read, or flagged by a check
            assert (edit, name) in READ_ELSEWHERE, (name, said)
            continue
        assert done.returncode == 1, (name, said)
        line = one_error_line(done.stderr)
        assert str(run / "gymflow.duckdb") in line and field in line, (name, line)
        if table is not None:
            assert f"table {table}, row " in line, (name, line)
    # a report read to the end is written beside the store; the store and the rest stay as they were
    after = {name: sha for name, sha in tree_digest(run).items() if not name.startswith("report")}
    assert rollout_rows(run / "gymflow.duckdb") == stored and after == digest


#: Commands that do not stop on the edited value: it decides nothing they print, or a check
#: flags it (a verdict's details are under its seal: health's seal_mismatch, exit 2).
READ_ELSEWHERE = {
    *(("latency NaN", name) for name in ("health", "profile", "diagnose", "reverify --check")),
    *(("details not JSON", name) for name in ("health", "reverify --check")),
    *(("response not JSON", name) for name in ("health", "reverify --check")),
    # read as DuckDB reads it; the report shows the one value as unreadable
    *(("details nested deep", name) for name in COMMANDS),
    *(("trajectory nested deep", name) for name in COMMANDS if name != "reverify --check"),
}


#: Values the exports parse that the commands above do not (attack pass 5, s06): each nested
#: too deep for Python's parser ended `gym export` in RecursionError, exit 3, on a run someone
#: sent (sealed with their key: no seal of this machine's stops the export first).
EXPORTED = {
    "trajectory": ("rollouts", "trajectory_json", "UPDATE rollouts SET trajectory_json = '[' || "
                   f"repeat('[', 100000) || repeat(']', 100000) || ']' WHERE rollout_id = {ONE}"),
    "task data": ("tasks", "data_json", f"UPDATE tasks SET data_json = {DEEP} WHERE task_id = "
                  "(SELECT min(task_id) FROM tasks)"),
    "request": ("model_calls", "request_json", f"UPDATE model_calls SET request_json = {DEEP} "
                f"WHERE rollout_id = {ONE}"),
}  # fmt: skip


@pytest.mark.parametrize("edit", sorted(EXPORTED))
@pytest.mark.parametrize("form", ["atif", "nemo-gym"])
def test_an_export_names_a_value_nested_too_deep(
    honest: Path, tmp_path: Path, edit: str, form: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    table, field, sql = EXPORTED[edit]
    edit_store(run, sql)
    digest = tree_digest(run)
    out = tmp_path / ("atif" if form == "atif" else "out.jsonl")
    done = gym_in_process("export", str(run), "--format", form, "--out", str(out), cwd=tmp_path,
                          env={"GYMFLOW_SEAL_KEY": "1" * 64})  # fmt: skip
    said = done.stdout + done.stderr
    assert "gymflow bug" not in said and "Traceback" not in said, said
    if done.returncode == 0:  # this form does not read the field
        assert (edit, form) in {("task data", "atif"), ("request", "atif")}, said
    else:
        line = one_error_line(done.stderr)
        assert done.returncode == 1 and f"table {table}, row " in line and field in line, line
    assert tree_digest(run) == digest


def test_text_that_is_not_utf8_is_named_not_a_crash(tmp_path: Path) -> None:
    """Attack pass 5 (s05): a block of a real store rewritten with DuckDB's checksum made right
    again (tests/fixtures/hostile/not-utf8, the attacker's mutation #21) leaves a model call's
    response that is not UTF-8. profile, diagnose and report ended in InvalidInputException,
    exit 3, from the very scan meant to name a bad value; now one line naming the table and
    the field, and nothing written."""
    import gzip

    run = tmp_path / "run"
    run.mkdir()
    fixture = Path(__file__).parents[1] / "fixtures" / "hostile" / "not-utf8" / "gymflow.duckdb.gz"
    (run / "gymflow.duckdb").write_bytes(gzip.decompress(fixture.read_bytes()))
    digest = tree_digest(run)
    for words in (("eval", "profile"), ("eval", "diagnose"), ("report",)):
        done = gym_in_process(*words, str(run), cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 1 and "gymflow bug" not in said, (words, said)
        line = one_error_line(done.stderr)
        assert "table model_calls" in line and "not UTF-8 text" in line, (words, line)
    assert tree_digest(run) == digest


def test_a_small_tables_value_that_unpacks_huge_is_refused_before_it_is_read(
    honest: Path, tmp_path: Path
) -> None:
    """Attack pass 5 (s04): 200 MB of `runs.config_json` takes 256 KB of the file (DuckDB
    compresses it), and every open read it whole before any check: health took 1.1 GB. Its
    size is asked first, and a value past any gymflow writes is one line."""
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    edit_store(run, "UPDATE runs SET config_json = '{\"a\":\"' || repeat('a', 20000000) || '\"}'")
    done = gym_in_process("eval", "health", str(run), cwd=tmp_path)
    line = one_error_line(done.stderr)
    assert done.returncode == 1 and "table runs, row " in line, line
    assert "field config_json: 20,000,008 bytes of JSON" in line, line


def test_many_capped_values_of_the_small_tables_are_refused_together(
    honest: Path, tmp_path: Path
) -> None:
    """Attack pass 6 (s16): each value under the bound, but 20 tool lists of 15 MB (half a MB
    of file) read at once took health 767 MB before its refusal. Their total is asked first."""
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    edit_store(
        run,
        "INSERT INTO tool_lists SELECT 'forged-' || i, '[\"' || repeat('a', 15000000) || '\"]' "
        "FROM range(20) t(i)",
    )
    done = gym_in_process("eval", "health", str(run), cwd=tmp_path)
    line = one_error_line(done.stderr)
    assert done.returncode == 1 and "bytes of JSON in its runs, verifier versions" in line, line
    assert "most in tool_lists.tools_json" in line, line


#: A text just past the bound of any field gymflow writes (core.config.MAX_TEXT_BYTES, 64 MiB),
#: as one row of each large table: (table, field, the edit).
PAST = "repeat('a', 70000000)"
HUGE_TEXT = {
    "answer": ("rollouts", "output_text", f"UPDATE rollouts SET output_text = {PAST} "
               f"WHERE rollout_id = {ONE}"),
    "trajectory": ("rollouts", "trajectory_json", f"UPDATE rollouts SET trajectory_json = "
                   f"'[\"' || {PAST} || '\"]' WHERE rollout_id = {ONE}"),
    "response": ("model_calls", "response_json", f"UPDATE model_calls SET response_json = "
                 f"'{{\"a\":\"' || {PAST} || '\"}}' WHERE rollout_id = {ONE}"),
    "details": ("verifications", "details_json", f"UPDATE verifications SET details_json = "
                f"'{{\"extracted\":\"' || {PAST} || '\"}}' WHERE rollout_id = {ONE}"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "wal"),
    [*((edit, False) for edit in sorted(HUGE_TEXT)), ("answer", True)],
    ids=[*sorted(HUGE_TEXT), "answer left in the WAL"],
)
def test_a_large_tables_text_past_the_bound_is_refused_naming_its_row(
    honest: Path, tmp_path: Path, edit: str, wal: bool
) -> None:
    """Attack pass s04, the large tables' class: 70 MB of one rollout's answer (or trajectory,
    a call's response, a verdict's details) takes a few hundred KB of the file, and every
    analysis read it whole, lowered, split and matched it. Past the bound of anything gymflow
    writes, it is one line naming the store, the table, the row and the field, found from
    DuckDB's statistics of the column (an open reads no value), whether the edit was
    checkpointed or left in the WAL a read replays; nothing stored changes."""
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    table, field, sql = HUGE_TEXT[edit]
    row = query(run / "gymflow.duckdb", f"SELECT {ONE}")[0][0]
    edit_store(run, *(["PRAGMA disable_checkpoint_on_shutdown"] if wal else []), sql)
    assert (run / "gymflow.duckdb.wal").exists() == wal
    digest = tree_digest(run)
    # every command meets the bound where it opens the store: each is run on the answer, health
    # on the other fields
    commands = COMMANDS if edit == "answer" else {"health": COMMANDS["health"]}
    for name, words in commands.items():
        done = gym_in_process(*(str(run) if w == "{run}" else w for w in words), cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 1 and "gymflow bug" not in said, (name, said)
        line = one_error_line(done.stderr)
        assert str(run / "gymflow.duckdb") in line, (name, line)
        assert f"table {table}, row {row}" in line and f"field {field}: " in line, (name, line)
        assert "bytes of text (gymflow writes at most 67,108,864 here)" in line, (name, line)
    assert tree_digest(run) == digest


def test_a_store_within_the_bound_opens_without_reading_its_text(honest: Path) -> None:
    """The bound is asked of DuckDB's statistics: every text column of an honest store is known
    to be within it, so no open scans one (at ten million rollouts a scan of the text columns
    costs seconds on every command)."""
    from gymflow.core.config import MAX_TEXT_BYTES
    from gymflow.store.db import connect
    from gymflow.store.stored_values import longest_texts

    con = connect(honest, read_only=True)
    try:
        longest = longest_texts(con)
        assert {table for table, _ in longest} == {
            "rollouts",
            "model_calls",
            "verifications",
            "tasks",
        }
        assert ("rollouts", "output_text") in longest and ("model_calls", "request_json") in longest
        unknown = [key for key, n in longest.items() if n is None or n > MAX_TEXT_BYTES]
        assert not unknown, unknown
    finally:
        con.close()
