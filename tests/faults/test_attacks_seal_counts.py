"""The row count of the rollouts' and model calls' seal records, under the key (issue 42,
attacker's pass 6, s14), and the stores an earlier gymflow sealed without it.

`meta.calls_seal` was `COUNT:XOR` of the calls' MACs, compared as text with a recount: the count
was plain text and `model_calls` has no key, so two more copies of a sealed call (their MACs
cancel) with the count raised by two passed `calls_edited`; only the generation record, sealed
over the records' text, still differed, read as "an older copy put back". Now each record is
`COUNT:XOR:MAC` with the MAC over the table, count and XOR (`store/sealed_rows.py`): the copies
are `calls_edited` (exit 2) in health, profile and `reverify --check`, and every writer refuses.

A store sealed by an earlier gymflow (seal record versions 3 to 5: the count unkeyed) is refused
by every reader and writer in one line naming `gym eval migrate RUN`, which checks every seal of
it in full as that gymflow sealed it and then seals it anew, its data and every number as they
were (`store/migration.py`). The committed fixture is a store gymflow e106dd2 wrote, with the
numbers that commit's profile and health gave of it (tests/fixtures/stores/seal_record_5)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym_in_process as gym
from tests.faults.stores import (
    as_an_older_gymflow_left_it,
    collect_run,
    copied_run,
    edit_store,
    one_error_line,
    query,
    tree_digest,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "stores" / "seal_record_5"
#: The test key the fixture was sealed with (its README).
FIXTURE_KEY = {"GYMFLOW_SEAL_KEY": "5eed" * 16}
#: Calls copied twice each: the most output tokens first (what the attacker's pass picked).
COPIED = 3


def _data(run: Path) -> dict[str, list]:
    """Every row of every gymflow table but `meta` (the seal records), sorted: the store's
    data, which no seal check or migration may change."""
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        tables = [
            name
            for (name,) in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
            ).fetchall()
            if name != "meta"
        ]
        return {
            name: sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
            for name in sorted(tables)
        }
    finally:
        con.close()


def _numbers(run: Path, cwd: Path, env: dict[str, str] | None = None) -> dict:
    """Every number health and profile give of the run (as `numbers.json` holds them), with
    their exit codes and what the seals read as."""
    checked = gym("eval", "health", str(run), "--json", "--verify-seals", cwd=cwd, env=env)
    assert checked.stdout, checked.stderr
    health = json.loads(checked.stdout)
    done = gym("eval", "profile", str(run), "--json", cwd=cwd, env=env)
    profile = json.loads(done.stdout)
    seals = profile.pop("seals")
    return {
        "health": {
            "verdict": health["verdict"],
            "gate_failures": sorted(health["gate_failures"]),
            "counts": {name: check["count"] for name, check in health["checks"].items()},
        },
        "profile": profile,
        "codes": (checked.returncode, done.returncode),
        "seals": (seals["intact"], seals["edited"]),
    }


def _copies_with_the_count_raised(run: Path) -> None:
    """s14, without the key: `COPIED` sealed calls stored twice more each (A ^ A ^ A = A), and
    the count in the calls' record raised by as many, the rest of the record as it was."""
    ((record,),) = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'calls_seal'")
    count, _, rest = str(record).partition(":")
    edit_store(
        run,
        "CREATE TEMP TABLE pick AS SELECT * FROM model_calls "
        f"ORDER BY output_tokens DESC, rollout_id LIMIT {COPIED}",
        "INSERT INTO model_calls SELECT * FROM pick",
        "INSERT INTO model_calls SELECT * FROM pick",
        f"UPDATE meta SET value = '{int(count) + 2 * COPIED}:{rest}' WHERE key = 'calls_seal'",
    )


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collect_run(tmp_path_factory.mktemp("counts") / "run", limit=10)


def test_copies_of_a_sealed_call_with_the_count_raised_are_calls_edited(
    honest: Path, tmp_path: Path
) -> None:
    """The attacker's pass: 20 -> 26 calls, the XOR unchanged, the count raised. Health fails
    `calls_edited` (not only the generation), profile and `reverify --check` exit 2 naming the
    model calls, a writer refuses with nothing written, and every score reads as before."""
    run = copied_run(honest, tmp_path / "run")
    before = _numbers(run, tmp_path)
    assert before["codes"] == (0, 0) and before["health"]["verdict"] == "healthy"
    _copies_with_the_count_raised(run)
    assert query(run / "gymflow.duckdb", "SELECT count(*) FROM model_calls")[0][0] == 20 + 6
    stored, digest = _data(run), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["health"]["counts"]["calls_edited"] == 1, after["health"]
    assert "calls_edited" in after["health"]["gate_failures"], after["health"]
    assert after["codes"] == (2, 2) and after["seals"][0] is False
    assert (
        "the model calls' statuses, latencies, tokens or bodies not as sealed" in after["seals"][1]
    )
    assert after["profile"] == before["profile"]  # no score reads the calls
    checked = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "model calls do not match their seal" in " ".join(checked.stdout.split())
    done = gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "model calls' statuses, failure kinds, latencies" in one_error_line(done.stderr)
    assert _data(run) == stored and tree_digest(run) == digest


def test_every_rows_record_holds_its_count_under_the_key(honest: Path, tmp_path: Path) -> None:
    """Of every table whose rows are sealed (rollouts, model calls): the record with only its
    count changed no longer matches, and a writer never folds rows into such a record (it
    would be sealed as honest)."""
    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_rows import SEALED_ROWS, rows_added, rows_sealed

    run = copied_run(honest, tmp_path / "run")
    key = load_key(create=False)
    assert key is not None
    for spec in SEALED_ROWS.values():
        con = duckdb.connect(str(run / "gymflow.duckdb"))
        try:
            assert rows_sealed(con, key, spec) is True
            (record,) = con.execute(
                "SELECT value FROM meta WHERE key = ?", [spec.record]
            ).fetchone()
            count, _, rest = str(record).partition(":")
            raised = f"{int(count) + 2}:{rest}"
            con.execute("UPDATE meta SET value = ? WHERE key = ?", [raised, spec.record])
            assert rows_sealed(con, key, spec) is False, spec.table
            rows_added(con, lambda: key, [(spec, [b"a new row"])])
            assert con.execute(
                "SELECT value FROM meta WHERE key = ?", [spec.record]
            ).fetchone() == (raised,)
        finally:
            con.close()


def _fixture_run(folder: Path) -> Path:
    """A copy of the store gymflow e106dd2 wrote (its README), in a run folder of its own."""
    run = folder / "run"
    run.mkdir()
    (run / "gymflow.duckdb").write_bytes(
        gzip.decompress((FIXTURE / "gymflow.duckdb.gz").read_bytes())
    )
    return run


def test_a_store_main_wrote_is_refused_until_migrated_with_every_number_unchanged(
    tmp_path: Path,
) -> None:
    """Every read and write of the e106dd2 store is refused in one line naming `gym eval
    migrate` with its folder, nothing written; the migration checks it and seals it as this
    gymflow does, its data unchanged, and then health and profile give exactly the numbers
    e106dd2 gave; a second migration has nothing to do; s14 on it is then `calls_edited`."""
    run = _fixture_run(tmp_path)
    expected = json.loads((FIXTURE / "numbers.json").read_text())
    stored, digest = _data(run), tree_digest(run)
    ((record,),) = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'calls_seal'")
    assert str(record).count(":") == 1  # COUNT:XOR, as e106dd2 wrote it
    refusal = f"run `gym eval migrate {run}`"
    for command in (
        ("eval", "health", str(run), "--verify-seals"),
        ("eval", "profile", str(run)),
        ("eval", "diagnose", str(run)),
        ("eval", "reverify", str(run), "--check"),
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
    ):
        done = gym(*command, cwd=tmp_path, env=FIXTURE_KEY)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        line = one_error_line(done.stderr)
        assert "sealed by an earlier gymflow (seal record version 5)" in line and refusal in line
    # only the key that sealed it migrates it: not this session's, nor none
    from gymflow.store.seal_key import load_key

    load_key(create=True)
    foreign = gym("eval", "migrate", str(run), cwd=tmp_path)
    assert foreign.returncode == 1
    assert "sealed with a key this machine does not hold" in one_error_line(foreign.stderr)
    assert _data(run) == stored and tree_digest(run) == digest

    done = gym("eval", "migrate", str(run), "--json", cwd=tmp_path, env=FIXTURE_KEY, check=True)
    assert json.loads(done.stdout) == {"seal_record_version_before": 5, "seal_record_version": 6}
    assert _data(run) == stored
    ((record,),) = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'calls_seal'")
    assert str(record).count(":") == 2  # COUNT:XOR:MAC
    now = _numbers(run, tmp_path, FIXTURE_KEY)
    assert now["codes"] == (0, 0) and now["seals"] == (True, [])
    # every check e106dd2 had counts as it did; a check added since finds nothing
    counts = now["health"].pop("counts")
    assert {k: counts.pop(k) for k in expected["health"]["counts"]} == expected["health"]["counts"]
    assert set(counts.values()) <= {0}, counts
    assert now["health"] == {k: v for k, v in expected["health"].items() if k != "counts"}
    assert now["profile"] == expected["profile"]
    again = gym("eval", "migrate", str(run), cwd=tmp_path, env=FIXTURE_KEY, check=True)
    assert "already sealed as this gymflow does (seal record version 6)" in again.stdout

    _copies_with_the_count_raised(run)
    after = _numbers(run, tmp_path, FIXTURE_KEY)
    assert "calls_edited" in after["health"]["gate_failures"] and after["codes"] == (2, 2)


def test_a_store_main_wrote_and_someone_edited_is_not_migrated(tmp_path: Path) -> None:
    """s14 on the e106dd2 store before its migration: what its seals still see (the generation
    sealed over the records' text) refuses the migration, exit 2, nothing written."""
    run = _fixture_run(tmp_path)
    _copies_with_the_count_raised(run)
    stored, digest = _data(run), tree_digest(run)
    done = gym("eval", "migrate", str(run), cwd=tmp_path, env=FIXTURE_KEY)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "nothing was written" in one_error_line(done.stderr)
    assert _data(run) == stored and tree_digest(run) == digest


@pytest.mark.parametrize("version", [3, 4])
def test_copies_in_a_store_sealed_before_the_generation_are_not_migrated(
    honest: Path, tmp_path: Path, version: int
) -> None:
    """A store an earlier gymflow sealed under record 3 or 4 has no generation, and its rows'
    records pass s14 as they did then: the migration refuses the copies themselves (no gymflow
    writer stores two calls of one identity), exit 2, nothing written. Untouched, the same
    store migrates, its numbers as before."""
    run = copied_run(honest, tmp_path / "run")
    honest_numbers = _numbers(run, tmp_path)
    as_an_older_gymflow_left_it(run, version)
    if version == 4:
        _copies_with_the_count_raised(run)
        stored, digest = _data(run), tree_digest(run)
        done = gym("eval", "migrate", str(run), cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        line = one_error_line(done.stderr)
        assert "6 model calls are stored more than once" not in line  # identities, not rows
        assert f"{COPIED} model calls are stored more than once" in line, line
        assert _data(run) == stored and tree_digest(run) == digest
        return
    gym("eval", "migrate", str(run), cwd=tmp_path, check=True)
    assert _numbers(run, tmp_path) == honest_numbers


def test_an_earlier_record_put_back_is_an_edit_not_an_older_store(
    honest: Path, tmp_path: Path
) -> None:
    """A store sealed under record 6 given a record 5 and its rows' records as record 5 wrote
    them (what an attacker holding an older store of this key can copy in; the record 5 text
    is the same in every such store) is not sent to the migration: the ledger says the store
    at this path was sealed under 6, so its rows' records are compared with the count keyed
    (`calls_edited`, `rollouts_edited`), and the migration refuses it."""
    run = copied_run(honest, tmp_path / "run")
    from gymflow.store.seal import _record
    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_rows import SEALED_ROWS, rows_record

    key = load_key(create=False)
    assert key is not None
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        earlier = {s.record: rows_record(con, key, s, counted=False) for s in SEALED_ROWS.values()}
    finally:
        con.close()
    edit_store(
        run,
        f"UPDATE meta SET value = '{_record(key, 0, version=5)}' WHERE key = 'seal'",
        *(
            f"UPDATE meta SET value = '{text}' WHERE key = '{name}'"
            for name, text in earlier.items()
        ),
    )
    stored, digest = _data(run), tree_digest(run)
    after = _numbers(run, tmp_path)
    failures = set(after["health"]["gate_failures"])
    assert {"calls_edited", "rollouts_edited", "task_list_edited"} <= failures, failures
    done = gym("eval", "migrate", str(run), cwd=tmp_path)
    assert done.returncode == 2 and "nothing was written" in one_error_line(done.stderr)
    assert _data(run) == stored and tree_digest(run) == digest
