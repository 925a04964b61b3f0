"""Rollouts rewritten in the store, with their verdicts: someone who can write the DuckDB file
rewrote a failing rollout's output to the reference answer and set its verdict to pass; health
agreed with itself and `gym eval reverify --check` judged the new output again as a pass, so
both read healthy. Published shards carried checksums beside their data, so whoever could write
the bucket rewrote both. Every verdict is now sealed with a key kept outside the store
(store/seal.py): health recomputes every seal and fails the run, `--check` exits 2, a shard
manifest rewritten without the key is refused at merge; a store from before the seal, or
sealed with a key this machine does not hold, is a warning that says which."""

from __future__ import annotations

import hashlib
import hmac
import json
import multiprocessing
import os
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import EvalConfig
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.published import COMMITTED, PublishedShard
from gymflow.rollouts.registration import register_run
from gymflow.store.db import connect
from gymflow.store.seal_key import SealKey, SealKeyError, key_file, load_key, sealed
from gymflow.store.verdict_message import MESSAGE, message_sql
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    one_error_line,
    rollout_rows,
    tree_digest,
)

OTHER_KEY = "ab" * 32  # another host's GYMFLOW_SEAL_KEY


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run every test here that needs `collect_run`'s own config edits a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


#: A failing rollout's output rewritten to its task's reference answer, its verdict to a pass.
REWRITTEN = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)",
    "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
)


def _failing(run: Path) -> set[str]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT rollout_id FROM verifications WHERE NOT passed").fetchall()
    finally:
        con.close()
    return {r for (r,) in rows}


def test_the_seal_is_hmac_sha256_of_the_message_framed_in_sql() -> None:
    """The one SQL expression every writer frames the message with, sealed outside DuckDB, is
    RFC 2104's HMAC of the framed fields (the format stores were always sealed in)."""
    key = SealKey(bytes(range(40)), "test")
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE v AS SELECT 'r1' AS rollout_id, 'ver@1' AS verifier_version, "
        "'ok' AS status, 1.0::DOUBLE AS reward, true AS passed, NULL::VARCHAR AS failure_kind, "
        "'{\"reason\":\"match\"}' AS details_json, 'run1' AS r_run_id, 't7' AS r_task_id, "
        "12 AS r_repeat_index, 'completed' AS r_status, NULL::VARCHAR AS r_failure_kind, "
        "'Answer: 8' AS r_output_text, '[]' AS r_trajectory_json"
    )
    table = sealed(con, key, f"SELECT {message_sql('v', 'v', 'r_')} AS {MESSAGE} FROM v")
    assert table is not None and table.column_names == ["seal"]
    message = (
        '2:r1|5:ver@1|2:ok|:|18:{"reason":"match"}|1.0|true'
        "|4:run1|2:t7|2:12|9:completed|:|9:Answer: 8|2:[]"
    )
    expected = hmac.new(key.secret, message.encode(), hashlib.sha256).hexdigest()[:32]
    assert table.column("seal").to_pylist() == [expected]


@pytest.mark.parametrize("length", [16, 32, 63, 64, 65, 200])
def test_the_sealer_is_hmac_sha256_for_a_key_of_any_length(length: int) -> None:
    """The sealer's one-message MAC (its own inner and outer SHA-256 states, not `hmac`'s) is
    RFC 2104's HMAC whether the key is shorter than SHA-256's 64-byte block, of its length
    or longer (hashed first): a key given in GYMFLOW_SEAL_KEY may be any of them."""
    key = SealKey(bytes((7 * i) % 256 for i in range(length)), "test")
    sealer = key.sealer
    for message in (b"", b"2:r1|5:ver@1", bytes(range(256)) * 40):
        expected = hmac.new(key.secret, message, hashlib.sha256)
        assert sealer.digest(message) == expected.digest()
        assert sealer.seal(message) == expected.hexdigest()[:32]


def test_an_output_rewritten_to_the_reference_and_passed_is_unhealthy(
    honest: Path, tmp_path
) -> None:
    run = copied_run(honest, tmp_path / "run")
    clean = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["checks"]["seal_mismatch"]["status"] == "ok"
    rewritten = _failing(run)
    assert rewritten
    edit_store(run, *REWRITTEN)
    before = rollout_rows(run / "gymflow.duckdb")

    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode != 0, checked.stdout
    report = json.loads(checked.stdout)
    assert report["verdict"] == "unhealthy" and "seal_mismatch" in report["gate_failures"]
    found = report["checks"]["seal_mismatch"]
    assert found["count"] == len(rewritten) and set(found["examples"]) == rewritten
    # the edit is consistent: no other integrity check sees it
    assert report["checks"]["verdict_disagrees"]["count"] == 0
    assert rollout_rows(run / "gymflow.duckdb") == before  # health changes nothing stored

    digest = tree_digest(run)
    again = gym("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path)
    assert again.returncode == 2, again.stdout + again.stderr
    result = json.loads(again.stdout)
    # judged again, the rewritten outputs pass: only the seals tell
    assert result["count"] == 0 and result["agrees"] is False
    assert result["seal_state"] == "sealed" and result["seal_mismatches"] == len(rewritten)
    shown = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert shown.returncode == 2
    assert f"{len(rewritten)} verdicts do not match their seals" in " ".join(shown.stdout.split())
    assert tree_digest(run) == digest  # the check wrote nothing


#: Edits of the rollout rows alone, verdicts and outputs untouched, that moved scores while
#: health read healthy (attacker's pass, issue 28): a failing rollout moved to a passing task
#: (pass@2 0.83 -> 1.0 on this 6-task run), a failing rollout's status set to an error kind
#: that every score leaves out (pass@1 0.75 -> 1.0).
MOVED = {
    "moved to another task": (
        "UPDATE rollouts SET task_id = (SELECT min(task_id) FROM verifications v JOIN rollouts x "
        "USING (rollout_id) WHERE v.passed) WHERE rollout_id IN {failing}"
    ),
    "moved to another repeat": (
        "UPDATE rollouts SET repeat_index = repeat_index + 100 WHERE rollout_id IN {failing}"
    ),
    "left out of scores": (
        "UPDATE rollouts SET status = 'error', failure_kind = 'rate_limited' "
        "WHERE rollout_id IN {failing}"
    ),
}


@pytest.mark.parametrize("edit", sorted(MOVED))
def test_a_rollout_moved_or_left_out_of_scores_is_unhealthy(
    honest: Path, tmp_path, edit: str
) -> None:
    run = copied_run(honest, tmp_path / "run")
    failing = _failing(run)
    assert failing
    listed = "(" + ", ".join(f"'{rid}'" for rid in sorted(failing)) + ")"
    before = rollout_rows(run / "gymflow.duckdb")
    edit_store(run, MOVED[edit].format(failing=listed))
    edited = rollout_rows(run / "gymflow.duckdb")
    assert {rid for rid in before if before[rid] != edited[rid]} == failing  # only those rows

    digest = tree_digest(run)
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert "seal_mismatch" in report["gate_failures"]
    assert set(report["checks"]["seal_mismatch"]["examples"]) == failing
    assert tree_digest(run) == digest  # health changes nothing stored


def test_a_sealed_rollout_copied_from_another_run_is_unhealthy(honest: Path, tmp_path) -> None:
    """A passing rollout of another run sealed by this machine, copied with its verdict and
    model calls over a failing one of the same task and repeat (its calls' sampling set to
    this run's): seals matched, and health read healthy at pass@1 0.75 -> 0.83 (attacker's
    pass, issue 28). Its seal binds its run_id, which is not this run's."""
    run = copied_run(honest, tmp_path / "run")
    other = collect_run(tmp_path / "other", sampling={"seed": 7})
    db, other_db = run / "gymflow.duckdb", other / "gymflow.duckdb"
    con = duckdb.connect(str(db))
    try:
        con.execute(f"ATTACH '{other_db}' AS o (READ_ONLY)")
        (task, repeat, theirs, ours, sampling) = con.execute(
            "SELECT r.task_id, r.repeat_index, x.rollout_id, r.rollout_id, "
            "(SELECT any_value(sampling_json) FROM model_calls) FROM rollouts r "
            "JOIN verifications v USING (rollout_id) "
            "JOIN o.rollouts x USING (task_id, repeat_index) "
            "JOIN o.verifications y ON y.rollout_id = x.rollout_id "
            "WHERE NOT v.passed AND y.passed ORDER BY 1, 2 LIMIT 1"
        ).fetchone()
        for table in ("model_calls", "verifications", "rollouts"):
            con.execute(f"DELETE FROM {table} WHERE rollout_id = ?", [ours])
        for table in ("rollouts", "model_calls", "verifications"):
            copy = f"INSERT INTO {table} SELECT * FROM o.{table} WHERE rollout_id = ?"
            con.execute(copy, [theirs])
        con.execute(
            "UPDATE model_calls SET sampling_json = ? WHERE rollout_id = ?", [sampling, theirs]
        )
    finally:
        con.close()
    before = rollout_rows(db)
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["checks"]["seal_mismatch"]["count"] == 0  # the copy carries its own seal
    assert "unknown_task" in report["gate_failures"], (task, repeat)
    assert report["checks"]["unknown_task"]["examples"] == [theirs]
    assert rollout_rows(db) == before  # health changes nothing stored


def test_a_verdict_whose_seal_is_removed_reads_as_tampered(honest: Path, tmp_path) -> None:
    run = copied_run(honest, tmp_path / "run")
    edit_store(run, *REWRITTEN, "UPDATE verifications SET seal = NULL WHERE passed")
    report = json.loads(gym("eval", "health", str(run), "--json", cwd=tmp_path).stdout)
    assert report["verdict"] == "unhealthy"
    assert report["checks"]["verdict_unsealed"]["count"] == 0


def test_reverify_seals_its_verdicts_and_the_superseded_keep_theirs(honest: Path, tmp_path) -> None:
    run = copied_run(honest, tmp_path / "run")
    out = gym("eval", "reverify", str(run), "--set", "abs_tol=5", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        by_version = con.execute(
            "SELECT verifier_version, count(*), count(seal) FROM verifications GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()
    assert len(by_version) == 2 and all(n == sealed for _, n, sealed in by_version)
    report = json.loads(gym("eval", "health", str(run), "--json", cwd=tmp_path).stdout)
    assert report["checks"]["seal_mismatch"]["status"] == "ok", report["checks"]["seal_mismatch"]


UNSEAL = ("ALTER TABLE verifications DROP COLUMN seal", "DELETE FROM meta WHERE key = 'seal'")


def test_a_store_from_before_the_seal_is_a_warning(honest: Path, tmp_path) -> None:
    written = copied_run(honest, tmp_path / "written")
    # what an older gymflow wrote: no seal column, no seal record, at a path never sealed here
    edit_store(written, *UNSEAL)
    run = written.rename(tmp_path / "run")
    before = rollout_rows(run / "gymflow.duckdb")
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["verdict"] == "healthy" and "verdict_unsealed" in report["warnings"]
    assert report["checks"]["verdict_unsealed"]["count"] == 12
    assert report["checks"]["seal_mismatch"]["status"] == "skipped"
    assert rollout_rows(run / "gymflow.duckdb") == before

    # a reverify by this gymflow seals what it adds; the old verdicts stay "before the seal"
    assert gym("eval", "reverify", str(run), "--set", "abs_tol=5", cwd=tmp_path).returncode == 0
    report = json.loads(gym("eval", "health", str(run), "--json", cwd=tmp_path).stdout)
    assert report["verdict"] == "healthy", report["gate_failures"]
    assert report["checks"]["seal_mismatch"]["status"] == "ok"
    assert report["checks"]["verdict_unsealed"]["count"] == 12


@pytest.mark.parametrize(
    "strip",
    [
        UNSEAL,  # reads as written before the seal
        (  # reads as sealed by a colleague's key
            "UPDATE meta SET value = '0123456789abcdef:0:' || repeat('0', 32) WHERE key = 'seal'",
            "UPDATE verifications SET seal = left(md5(seal), 32)",
        ),
    ],
    ids=["unsealed", "another-key"],
)
def test_seals_stripped_from_a_store_sealed_here_are_an_integrity_failure(
    honest: Path, tmp_path, strip
):
    """Every seal and the seal record removed or rewritten together, with the failing outputs
    rewritten to the reference and passed: inside the file nothing tells this from an older or
    a colleague's store, which only warn, and pass@1 read 1.0 healthy (attacker's pass, issue
    28). This machine remembers the path of every store it sealed (beside the key)."""
    run = copied_run(honest, tmp_path / "run")
    _failing(run)
    edit_store(run, *REWRITTEN, *strip)
    before, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert tree_digest(run) == digest  # the checks write nothing
    assert checked.returncode == 2, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert "seal_stripped" in report["gate_failures"]
    assert report["checks"]["seal_stripped"]["count"] == 12
    assert not {"verdict_unsealed", "seal_key_unknown"} & set(report["warnings"])
    again = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert again.returncode == 2, again.stdout + again.stderr
    assert "12 verdicts lost their seals" in " ".join(again.stdout.split())
    write = gym("eval", "reverify", str(run), "--set", "abs_tol=5", cwd=tmp_path)
    assert write.returncode == 2  # an integrity failure, found before judging (sealed_first.py)
    assert "this machine sealed this store" in one_error_line(write.stderr)
    # refused before any verdict; a writer's connection gave a dropped column back, empty
    assert rollout_rows(run / "gymflow.duckdb") == before


def test_a_store_sealed_with_another_key_says_so(honest: Path, tmp_path) -> None:
    run = copied_run(honest, tmp_path / "run")
    other = {"GYMFLOW_SEAL_KEY": OTHER_KEY}
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path, env=other)
    report = json.loads(checked.stdout)
    assert report["verdict"] == "healthy" and "seal_key_unknown" in report["warnings"]
    assert "a key this machine does not hold" in report["checks"]["seal_key_unknown"]["description"]
    assert report["checks"]["seal_mismatch"]["status"] == "skipped"  # not "tampered"

    again = gym("eval", "reverify", str(run), "--check", cwd=tmp_path, env=other)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "sealed with a key this machine does not hold" in " ".join(again.stdout.split())

    digest = tree_digest(run)
    write = gym("eval", "reverify", str(run), "--set", "abs_tol=5", cwd=tmp_path, env=other)
    assert write.returncode == 1
    assert "sealed with a key this machine does not hold" in one_error_line(write.stderr)
    assert tree_digest(run) == digest  # refused before anything was written


def test_a_seal_record_edited_to_name_another_key_still_checks(honest: Path, tmp_path) -> None:
    """The record naming the sealing key is in the store: set to another key's id, every check
    skipped the seals (`seal_key_unknown`, a warning) and a rewritten run read healthy at
    pass@1 1.0 (attacker's pass, issue 28). Seals this machine's key made are checked by it
    whatever the record says."""
    run = copied_run(honest, tmp_path / "run")
    rewritten = _failing(run)
    edit_store(
        run,
        "UPDATE meta SET value = '0123456789abcdef:0:' || repeat('0', 32) WHERE key = 'seal'",
        *REWRITTEN,
    )
    before = rollout_rows(run / "gymflow.duckdb")
    digest = tree_digest(run)
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert "seal_mismatch" in report["gate_failures"]
    assert "seal_key_unknown" not in report["warnings"]
    assert set(report["checks"]["seal_mismatch"]["examples"]) == rewritten
    again = gym("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path)
    assert again.returncode == 2, again.stdout + again.stderr
    assert json.loads(again.stdout)["seal_mismatches"] == len(rewritten)
    assert tree_digest(run) == digest and rollout_rows(run / "gymflow.duckdb") == before


def test_a_key_file_others_can_read_is_one_error_line(honest: Path, tmp_path) -> None:
    config = tmp_path / "config"
    env = {"XDG_CONFIG_HOME": str(config)}
    run = copied_run(honest, tmp_path / "run")
    # the first use makes the key file, owner-only; a readable one is refused, never used
    gym("eval", "reverify", str(run), "--set", "abs_tol=5", cwd=tmp_path, env=env)
    key_file = config / "gymflow" / "seal.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    os.chmod(key_file, 0o644)
    out = gym("eval", "health", str(run), cwd=tmp_path, env=env)
    assert out.returncode == 1
    line = one_error_line(out.stderr)
    assert str(key_file) in line and "mode 0644" in line


def _first_use(config: str) -> str:
    os.environ["XDG_CONFIG_HOME"] = config
    try:
        return load_key(create=True).key_id
    except SealKeyError as exc:
        return f"refused: {exc}"


def test_processes_making_the_key_at_once_all_get_it(tmp_path, monkeypatch) -> None:
    """Shards starting together on a fresh machine each make the key file on first use; one
    read the file another had just created, still empty, and failed ("a seal key of 0 bytes":
    3 of 30 tries of 8 processes, attacker's pass, issue 28)."""
    fork = multiprocessing.get_context("fork")
    for attempt in range(10):
        config = tmp_path / f"config-{attempt}"
        with fork.Pool(8) as pool:
            ids = pool.map(_first_use, [str(config)] * 8, chunksize=1)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
        made = load_key(create=False)
        assert ids == [made.key_id] * 8, ids
        assert sorted(p.name for p in key_file().parent.iterdir()) == ["seal.key"]  # no partial


def test_a_key_file_replaced_by_a_fifo_is_refused_not_waited_on(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    key_file().parent.mkdir(parents=True)
    os.mkfifo(key_file(), 0o600)
    with pytest.raises(SealKeyError, match="not a regular file"):
        load_key(create=False)


def _published(tmp_path: Path) -> tuple[str, PublishedShard]:
    url = f"file://{tmp_path / 'root'}/run"
    run_dir = collect_run(tmp_path / "shard", shard={"index": 0, "count": 2})
    shard = PublishedShard(f"{url}/shard-0-of-2")
    shard.commit(run_dir, "a1")
    return url, shard


def test_a_shard_whose_data_and_checksums_were_rewritten_is_refused(tmp_path) -> None:
    url, shard = _published(tmp_path)
    manifest = json.loads(shard.remote.read(COMMITTED, 1 << 20))
    name = manifest["files"]["verifications"]["name"]
    # whoever can write the bucket: every verdict a pass, and the checksum to match
    forged = tmp_path / "forged.parquet"
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT * REPLACE (true AS passed, 1.0 AS reward) FROM "
        f"read_parquet('{tmp_path / 'root' / 'run' / 'shard-0-of-2' / name}')) "
        f"TO '{forged}' (FORMAT parquet)"
    )
    con.close()
    data = forged.read_bytes()
    shard.remote.put(name, data)
    manifest["files"]["verifications"].update(
        sha256=hashlib.sha256(data).hexdigest(), bytes=len(data)
    )
    shard.remote.put(COMMITTED, json.dumps(manifest).encode())

    out = tmp_path / "merged"
    merged = gym("eval", "aggregate", url, "--out", str(out), cwd=tmp_path)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "does not match its seal" in one_error_line(merged.stderr)
    assert not (out / "gymflow.duckdb").exists()


def test_a_shard_sealed_with_another_key_is_refused_at_merge(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GYMFLOW_SEAL_KEY", OTHER_KEY)  # the worker's key
    url, _ = _published(tmp_path)
    monkeypatch.delenv("GYMFLOW_SEAL_KEY")
    out = tmp_path / "merged"
    merged = gym("eval", "aggregate", url, "--out", str(out), cwd=tmp_path)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "sealed with a key this machine does not hold" in one_error_line(merged.stderr)


def test_a_shard_store_sealed_with_another_key_is_refused_at_merge(tmp_path, monkeypatch):
    shards = tmp_path / "shards"
    collect_run(shards / "shard-0", shard={"index": 0, "count": 2})
    monkeypatch.setenv("GYMFLOW_SEAL_KEY", OTHER_KEY)  # another host's
    collect_run(shards / "shard-1", shard={"index": 1, "count": 2})
    monkeypatch.delenv("GYMFLOW_SEAL_KEY")
    out = tmp_path / "merged"
    merged = gym(
        "eval",
        "aggregate",
        str(shards / "shard-0"),
        str(shards / "shard-1"),
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert merged.returncode == 1, merged.stdout + merged.stderr
    line = one_error_line(merged.stderr)
    assert "shard-1: refused: sealed with a key this machine does not hold" in line
    assert "nothing merged" in line


def test_a_run_resumed_with_another_key_is_refused_before_any_model_call(
    honest: Path, tmp_path, monkeypatch
) -> None:
    run = copied_run(honest, tmp_path / "run")
    before = rollout_rows(run / "gymflow.duckdb")
    plan = resolve(
        EvalConfig.model_validate(
            {"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2, "out": str(run)}
        )
    )
    monkeypatch.setenv("GYMFLOW_SEAL_KEY", OTHER_KEY)
    con = connect(run)
    try:
        with pytest.raises(SealKeyError, match="sealed with a key this machine does not hold"):
            register_run(con, plan, resume=True)  # what `gym eval run --resume` does first
    finally:
        con.close()
    assert rollout_rows(run / "gymflow.duckdb") == before


def test_a_task_deleted_with_all_it_held_is_an_integrity_failure(honest: Path, tmp_path) -> None:
    """A failing task taken out with its rollouts, verdicts and calls: every verdict left keeps
    its seal and every count agrees, and pass@1 read 0.90 instead of 0.75, healthy (attacker's
    pass, issue 28). The task list is sealed too."""
    run = copied_run(honest, tmp_path / "run")
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        (task,) = con.execute(
            "SELECT min(r.task_id) FROM rollouts r JOIN verifications v USING (rollout_id) "
            "WHERE NOT v.passed"
        ).fetchone()
    finally:
        con.close()
    held = f"(SELECT rollout_id FROM rollouts WHERE task_id = '{task}')"
    edit_store(
        run,
        f"DELETE FROM model_calls WHERE rollout_id IN {held}",
        f"DELETE FROM verifications WHERE rollout_id IN {held}",
        f"DELETE FROM rollouts WHERE task_id = '{task}'",
        f"DELETE FROM tasks WHERE task_id = '{task}'",
    )
    digest = tree_digest(run)
    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    # the task's row was one of the sealed inputs too (store/sealed_inputs.py), and its
    # rollouts, their model calls and their verdicts were sealed (store/sealed_rows.py)
    assert report["gate_failures"] == [
        "task_list_edited",
        "inputs_edited",
        "rollouts_edited",
        "calls_edited",
        "verdicts_edited",
    ], report

    assert tree_digest(run) == digest
