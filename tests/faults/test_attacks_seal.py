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
import os
from pathlib import Path

import duckdb
import pytest

from gymflow.config import EvalConfig
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.published import COMMITTED, PublishedShard
from gymflow.rollouts.registration import register_run
from gymflow.store.db import connect
from gymflow.store.seal import SealKey, SealKeyError, arm, seal_sql
from tests.conftest import gym
from tests.faults.stores import collect_run, one_error_line, rollout_rows, tree_digest

OTHER_KEY = "ab" * 32  # another host's GYMFLOW_SEAL_KEY


def _edit(run: Path, *statements: str) -> None:
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


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


def test_the_seal_is_hmac_sha256_computed_in_sql() -> None:
    """The one SQL expression every writer seals with is RFC 2104's HMAC of the framed fields."""
    key = SealKey(bytes(range(40)), "test")
    con = duckdb.connect()
    arm(con, key)
    con.execute(
        "CREATE TABLE v AS SELECT 'r1' AS rollout_id, 'ver@1' AS verifier_version, "
        "'ok' AS status, 1.0::DOUBLE AS reward, true AS passed, NULL::VARCHAR AS failure_kind, "
        "'{\"reason\":\"match\"}' AS details_json, 'Answer: 8' AS output_text, "
        "'[]' AS trajectory_json"
    )
    sealed = con.execute(f"SELECT {seal_sql('v', 'v')} FROM v").fetchone()[0]
    message = '2:r1|5:ver@1|2:ok|:|18:{"reason":"match"}|1.0|true|9:Answer: 8|2:[]'
    assert sealed == hmac.new(key.secret, message.encode(), hashlib.sha256).hexdigest()[:32]


def test_an_output_rewritten_to_the_reference_and_passed_is_unhealthy(tmp_path) -> None:
    run = collect_run(tmp_path / "run")
    clean = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["checks"]["seal_mismatch"]["status"] == "ok"
    rewritten = _failing(run)
    assert rewritten
    _edit(run, *REWRITTEN)
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


def test_a_verdict_whose_seal_is_removed_reads_as_tampered(tmp_path) -> None:
    run = collect_run(tmp_path / "run")
    _edit(run, *REWRITTEN, "UPDATE verifications SET seal = NULL WHERE passed")
    report = json.loads(gym("eval", "health", str(run), "--json", cwd=tmp_path).stdout)
    assert report["verdict"] == "unhealthy"
    assert report["checks"]["verdict_unsealed"]["count"] == 0


def test_reverify_seals_its_verdicts_and_the_superseded_keep_theirs(tmp_path) -> None:
    run = collect_run(tmp_path / "run")
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


def test_a_store_from_before_the_seal_is_a_warning(tmp_path) -> None:
    run = collect_run(tmp_path / "run")
    # what an older gymflow wrote: no seal column, no seal record
    _edit(run, "ALTER TABLE verifications DROP COLUMN seal", "DELETE FROM meta WHERE key = 'seal'")
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


def test_a_store_sealed_with_another_key_says_so(tmp_path) -> None:
    run = collect_run(tmp_path / "run")
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


def test_a_key_file_others_can_read_is_one_error_line(tmp_path) -> None:
    config = tmp_path / "config"
    env = {"XDG_CONFIG_HOME": str(config)}
    run = collect_run(tmp_path / "run")
    # the first use makes the key file, owner-only; a readable one is refused, never used
    gym("eval", "reverify", str(run), "--set", "abs_tol=5", cwd=tmp_path, env=env)
    key_file = config / "gymflow" / "seal.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    os.chmod(key_file, 0o644)
    out = gym("eval", "health", str(run), cwd=tmp_path, env=env)
    assert out.returncode == 1
    line = one_error_line(out.stderr)
    assert str(key_file) in line and "mode 0644" in line


def _published(tmp_path: Path) -> tuple[str, PublishedShard]:
    url = f"file://{tmp_path / 'root'}/run"
    run_dir = collect_run(tmp_path / "shard", shard={"index": 0, "count": 2})
    shard = PublishedShard(f"{url}/shard-0-of-2")
    shard.commit(run_dir, "a1")
    return url, shard


def test_a_shard_whose_data_and_checksums_were_rewritten_is_refused(tmp_path) -> None:
    url, shard = _published(tmp_path)
    manifest = json.loads(shard.remote.read(COMMITTED))
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
    tmp_path, monkeypatch
) -> None:
    run = collect_run(tmp_path / "run")
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
