"""Expressions a store holds, run inside gymflow's statements (issue 42, attacker's pass over
193679f). The seal's key reached DuckDB as two session variables (HMAC's pads), set on the
connection before any check; and a table's own expressions run in gymflow's SQL:

- a `verifications.seal` column `GENERATED ALWAYS AS (...)` computed the HMAC from those pads,
  so every verdict rewritten to a pass carried a matching seal: pass@1 57.5% -> 100%, healthy,
  `reverify --check` "every verdict matches its seal";
- `ADD COLUMN note BLOB DEFAULT getvariable('gymflow_seal_ipad')` had the owner's next
  reverify copy the pad into 40 rows: XOR 0x36 gives the key back.

Now the MAC is computed in Python over the messages DuckDB frames (no variable, macro or
statement ever holds the key or a pad), and every gymflow table must be exactly gymflow's
(columns, order, types, defaults, generated columns, constraints) or the store is refused in one
line naming what differs, by readers and writers alike, before any of gymflow's SQL runs."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from gymflow.analysis.health import health
from gymflow.store.db import connect, transaction
from gymflow.store.seal_key import load_key
from gymflow.store.verdict_message import SEALED_ROLLOUT, SEALED_VERDICT
from gymflow.store.writer import VERDICT_COLUMNS, insert_verdicts
from tests.conftest import gym_in_process as gym  # reads of stored runs: no process needed
from tests.faults.stores import collect_run, one_error_line, rollout_rows, run_gym, tree_digest

#: The seal's old SQL (193679f), over the pads wherever a session holds them: what the
#: attacker's generated column computed.
_FRAMED = [f"strlen({c}::VARCHAR), ':', {c}::VARCHAR" for c in SEALED_VERDICT]
_FRAMED += ["reward", "passed"]
_FRAMED += [
    f"strlen((SELECT {c} FROM rollouts_copy r WHERE r.rollout_id = v_id)::VARCHAR), ':', "
    f"(SELECT {c} FROM rollouts_copy r WHERE r.rollout_id = v_id)::VARCHAR"
    for c in SEALED_ROLLOUT
]
FORGED_SEAL = (
    "left(sha256(getvariable('gymflow_seal_opad') || unhex(sha256("
    "getvariable('gymflow_seal_ipad') || encode(concat(" + ", '|', ".join(_FRAMED) + "))))), 32)"
)

#: Failing outputs rewritten to the reference, their verdicts to a pass.
PASSED = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)",
    "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
)

#: Each way of giving a gymflow table an expression or another shape, and what the refusal
#: names. A generated column cannot refer to another table, so the forged seal's is written as
#: the attacker's pass did it: a plain column the edits fill, re-created generated (below).
EDITS = {
    "default reading the pad": (
        "ALTER TABLE verifications ADD COLUMN note BLOB DEFAULT getvariable('gymflow_seal_ipad')",
        "table verifications: column 'note' is not gymflow's",
    ),
    "default on gymflow's column": (
        "ALTER TABLE verifications ALTER COLUMN details_json "
        "SET DEFAULT getvariable('gymflow_seal_opad')::VARCHAR",
        "table verifications: column 'details_json' has default or expression",
    ),
    "generated column": (
        "CREATE TABLE t2 AS SELECT * FROM tool_lists; DROP TABLE tool_lists; "
        "CREATE TABLE tool_lists (tools_id VARCHAR PRIMARY KEY, tools_json VARCHAR "
        "GENERATED ALWAYS AS (getvariable('gymflow_seal_ipad')::VARCHAR)); "
        "INSERT INTO tool_lists (tools_id) SELECT tools_id FROM t2; DROP TABLE t2",
        "table tool_lists: column 'tools_json' has default or expression",
    ),
    "another type": (
        "ALTER TABLE verifications ALTER COLUMN reward TYPE VARCHAR",
        "table verifications: column 'reward' is VARCHAR, gymflow's is DOUBLE",
    ),
    "NOT NULL": (
        "ALTER TABLE tasks ALTER COLUMN difficulty SET NOT NULL",
        "table tasks: column 'difficulty' is NOT NULL",
    ),
    "a check constraint": (
        "CREATE TABLE t2 AS SELECT * FROM tool_lists; DROP TABLE tool_lists; "
        "CREATE TABLE tool_lists (tools_id VARCHAR PRIMARY KEY, tools_json VARCHAR "
        "CHECK (length(tools_json) < 1000000)); INSERT INTO tool_lists SELECT * FROM t2; "
        "DROP TABLE t2",
        "table tool_lists: its constraints",
    ),
    "columns reordered": (
        "CREATE TABLE m2 AS SELECT value, key FROM meta; DROP TABLE meta; "
        "CREATE TABLE meta (value VARCHAR, key VARCHAR PRIMARY KEY); "
        "INSERT INTO meta SELECT * FROM m2; DROP TABLE m2",
        "table meta: column 'key' is at position 2, gymflow's at 1",
    ),
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("clean") / "run", limit=20, repeats=2)


def _copy(clean: Path, folder: Path) -> Path:
    run = folder / "run"
    shutil.copytree(clean, run)
    return run


def _numbers(run: Path, cwd: Path) -> dict:
    """Every number the read commands give: health's verdict and gate, profile's scores."""
    checked = gym("eval", "health", str(run), "--json", cwd=cwd)
    profiled = gym("eval", "profile", str(run), "--json", cwd=cwd, check=True)
    report = json.loads(checked.stdout)
    return {
        "health": (report["verdict"], report["gate"], sorted(report["failing_checks"])),
        "profile": json.loads(profiled.stdout),
    }


def _forge(run: Path) -> None:
    """The attacker's pass: outputs and verdicts rewritten to a pass, then `seal` made a
    generated column computing the HMAC from whatever pads the session holds (with a copy of
    the rollouts' sealed columns beside each verdict, since a generated column reads only its
    own row)."""
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        for sql in PASSED:
            con.execute(sql)
        rollout_cols = ", ".join(f"r.{c} AS r_{c}" for c in SEALED_ROLLOUT)
        con.execute(
            "CREATE TABLE v2 AS SELECT v.* EXCLUDE (seal), "
            f"{rollout_cols} FROM verifications v JOIN rollouts r USING (rollout_id)"
        )
        own = FORGED_SEAL.replace("v_id", "rollout_id")
        for c in SEALED_ROLLOUT:
            own = own.replace(
                f"(SELECT {c} FROM rollouts_copy r WHERE r.rollout_id = rollout_id)", f"r_{c}"
            )
        con.execute("DROP TABLE verifications")
        columns = ", ".join(
            f"{name} {kind}"
            for name, kind in con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'v2' "
                "ORDER BY column_index"
            ).fetchall()
        )
        con.execute(
            f"CREATE TABLE verifications ({columns}, seal VARCHAR GENERATED ALWAYS AS ({own}) "
            "VIRTUAL, PRIMARY KEY (rollout_id, verifier_version))"
        )
        con.execute("INSERT INTO verifications SELECT * FROM v2")
        con.execute("DROP TABLE v2")
    finally:
        con.close()


def test_a_seal_forged_by_a_generated_column_is_refused_and_the_numbers_stay(
    clean: Path, tmp_path: Path, prefect_api: str
) -> None:
    """The attack of issue 42 reproduced: the store is refused by health, profile, `reverify
    --check` and a reverify, each in one line naming the column, nothing changes; the numbers
    before the edit are what an unedited copy still gives."""
    before = _numbers(clean, tmp_path)
    assert before["health"][0] == "healthy" and before["profile"]["pass@1"] < 1.0
    run = _copy(clean, tmp_path)
    _forge(run)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    for command in (
        ("eval", "health", str(run), "--json"),
        ("eval", "profile", str(run), "--json"),
        ("eval", "reverify", str(run), "--check"),
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
    ):
        done = run_gym(*command, cwd=tmp_path, prefect_api=prefect_api)
        line = one_error_line(done.stderr)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "not gymflow's schema" in line and "table verifications" in line, line
        assert "'r_run_id' is not gymflow's" in line, line
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest
    assert _numbers(clean, tmp_path) == before


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_table_that_is_not_exactly_gymflow_s_is_refused_by_readers_and_writers(
    clean: Path, tmp_path: Path, prefect_api: str, edit: str
) -> None:
    sql, named = EDITS[edit]
    run = _copy(clean, tmp_path)
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        for statement in sql.split("; "):
            con.execute(statement)
    finally:
        con.close()
    digest = tree_digest(run)
    stored = rollout_rows(run / "gymflow.duckdb")
    for command in (
        ("eval", "health", str(run), "--json"),
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
    ):
        done = run_gym(*command, cwd=tmp_path, prefect_api=prefect_api)
        line = one_error_line(done.stderr)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert str(run / "gymflow.duckdb") in line and named in line, line
    assert tree_digest(run) == digest and rollout_rows(run / "gymflow.duckdb") == stored


def _key_material() -> list[bytes]:
    """The key and HMAC's pads (RFC 2104), as the attacker would look for them."""
    key = load_key(create=False)
    assert key is not None
    block = key.secret.ljust(64, b"\0")
    return [key.secret, bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)]


def test_no_session_variable_ever_holds_the_key_or_a_pad(clean: Path, tmp_path: Path) -> None:
    """A connection that checked every seal (health) and wrote sealed verdicts holds no
    variable at all that a store's expression could read: `getvariable` of the old names is
    NULL, and no variable's value holds the key or a pad."""
    run = _copy(clean, tmp_path)
    con = connect(run)
    try:
        result = health(con)
        assert result.checks["seal_mismatch"].status == "ok"
        verdict = con.execute(
            f"SELECT {', '.join(VERDICT_COLUMNS)} FROM verifications LIMIT 1"
        ).fetchone()
        judged = con.execute(
            f"SELECT {', '.join(SEALED_ROLLOUT)} FROM rollouts WHERE rollout_id = ?", [verdict[0]]
        ).fetchone()
        with transaction(con):
            insert_verdicts(con, [(verdict[0], "other@1", *verdict[2:])], [judged])
        assert health(con).checks["seal_mismatch"].status == "ok"
        values = con.execute("SELECT name, value::VARCHAR FROM duckdb_variables()").fetchall()
        pads = con.execute(
            "SELECT getvariable('gymflow_seal_ipad'), getvariable('gymflow_seal_opad')"
        ).fetchone()
    finally:
        con.close()
    assert pads == (None, None)
    material = [m.hex() for m in _key_material()]
    for name, value in values:
        text = (value or "").lower().replace("\\x", "")
        assert not any(m in text for m in material), name


def test_a_reverify_after_the_key_leak_edit_writes_no_key_into_the_store(
    clean: Path, tmp_path: Path, prefect_api: str
) -> None:
    """`ADD COLUMN note BLOB DEFAULT getvariable('gymflow_seal_ipad')`: the owner's routine
    reverify is refused; and a reverify of the clean store (which does write) leaves no byte
    of the key or its pads in the file."""
    run = _copy(clean, tmp_path)
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    con.execute(EDITS["default reading the pad"][0])
    con.close()
    done = run_gym(
        "eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, prefect_api=prefect_api
    )
    assert done.returncode == 1 and "column 'note'" in one_error_line(done.stderr)
    written = _copy(clean, tmp_path / "written")
    run_gym(
        "eval",
        "reverify",
        str(written),
        "--set",
        "abs_tol=0.5",
        cwd=tmp_path,
        prefect_api=prefect_api,
        check=True,
    )
    for path in (run, written):
        data = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
        for material in _key_material():
            assert material not in data and material.hex().encode() not in data


def test_the_seal_is_the_same_mac_stores_were_sealed_with(clean: Path) -> None:
    """The format is unchanged (the same framing, HMAC-SHA256 truncated to 128 bits): every
    seal of a store sealed before this change verifies under the new check; one computed here
    from the framed message equals RFC 2104's HMAC of it."""
    key = load_key(create=False)
    con = duckdb.connect(str(clean / "gymflow.duckdb"), read_only=True)
    try:
        con.execute("SET VARIABLE gymflow_seal_ipad = ?::BLOB", [_key_material()[1]])
        con.execute("SET VARIABLE gymflow_seal_opad = ?::BLOB", [_key_material()[2]])
        con.execute("CREATE TEMP TABLE rollouts_copy AS SELECT * FROM rollouts")
        old = dict(
            con.execute(
                f"SELECT rollout_id, {FORGED_SEAL.replace('v_id', 'v.rollout_id')} "
                "FROM verifications v"
            ).fetchall()
        )
        stored = dict(con.execute("SELECT rollout_id, seal FROM verifications").fetchall())
    finally:
        con.close()
    assert old == stored  # the old SQL's seals are the ones stored
    message = b"2:r1|5:ver@1|2:ok|:|2:{}|1.0|true|4:run1|2:t7|1:3|9:completed|:|1:8|2:[]"
    assert (
        key.sealer.seal(message) == hmac.new(key.secret, message, hashlib.sha256).hexdigest()[:32]
    )
