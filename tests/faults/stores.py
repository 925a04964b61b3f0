"""Helpers of the fault-injection suite: running `gym` against the suite's Prefect server, and
reading stores the way each test's final check needs."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import duckdb

from gymflow.core.config import EvalConfig
from gymflow.rollouts.collect import run_collect
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.simulated.endpoint import local_policy_server
from gymflow.store.db import connect
from gymflow.store.sealed_stores import remember_copy
from tests.conftest import gym


def gym_env(prefect_api: str, **extra: str) -> dict[str, str]:
    """Environment for a `gym` subprocess that talks to the suite's Prefect server."""
    return {"PREFECT_API_URL": prefect_api, "PYTHONUNBUFFERED": "1", **extra}


def run_gym(*args: str, cwd: Path, prefect_api: str, **kwargs) -> subprocess.CompletedProcess:
    env = gym_env(prefect_api, **kwargs.pop("env", {}))
    return gym(*args, cwd=cwd, env=env, **kwargs)


# Stored columns that must agree between two runs of one config and seed: everything but times.
ROLLOUT_COLUMNS = (
    "task_id, repeat_index, seed, status, failure_kind, error, incomplete, output_text, "
    "trajectory_json, num_turns, num_model_calls, input_tokens, output_tokens"
)


def rollout_rows(store: Path) -> dict[str, tuple]:
    """rollout_id -> (rollout columns..., verifier version, verification status, reward, passed,
    failure kind, details)."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            f"""
            SELECT r.rollout_id, {", ".join(f"r.{c.strip()}" for c in ROLLOUT_COLUMNS.split(","))},
                   v.verifier_version, v.status, v.reward, v.passed, v.failure_kind, v.details_json
            FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
            """
        ).fetchall()
    finally:
        con.close()
    return {row[0]: row[1:] for row in rows}


def query(store: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def tree_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`: proof that a refused command changed nothing."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def collect_run(out: Path, **config: Any) -> Path:
    """A small stored run made with the collector directly (no Prefect): the store the bad-input
    tests aim their commands at. Returns the run directory."""
    plan = resolve(
        EvalConfig.model_validate(
            {"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2, "out": str(out), **config}
        )
    )
    con = connect(plan.run_dir, create=True)
    try:
        register_run(con, plan, resume=False)
        with local_policy_server(plan) as server:
            run_collect(plan, plan.keys(), con, base_url=server.base_url)
    finally:
        con.close()
    return out


def copied_run(source: Path, to: Path) -> Path:
    """A copy at `to` of a run `collect_run` made (a module's one honest run), recorded as
    sealed by this machine as `source` is: what `collect_run` of the same config at `to` leaves
    (the run id is the config's, not the folder's), without collecting again (a policy
    server's start and the collection: 1 to 2 s of a test on a busy machine)."""
    shutil.copytree(source, to)
    remember_copy(source / "gymflow.duckdb", to / "gymflow.duckdb")
    return to


def edit_store(run: Path, *statements: str) -> None:
    """SQL run on a run's store from outside gymflow, as someone who can write the file."""
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


def as_an_older_gymflow_left_it(run: Path, version: int) -> None:
    """The store as a gymflow writing seal records of `version` (1 to 5) left it, made with
    this machine's key as that gymflow would: its record of that version, its task list sealed
    under it, its inputs under the MAC of then (without the server's report before 5), its
    rows' records with their count in plain text (3 to 5: `COUNT:XOR`), no seal of what that
    version did not seal (1: its inputs; 1 and 2: its rollouts; 1 to 3: its model calls; 1 to
    4: its generation, and none recorded for its path; every version: its store id), and this
    machine's sealed-stores ledger naming no later version at its path. What an attacker cannot
    do: the task list's seal needs the key."""
    from gymflow.store.generations import GENERATION_KEY, _mac, record_at
    from gymflow.store.named_paths import path_names
    from gymflow.store.seal import _record, _task_list_mac
    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_inputs import INPUTS_VERSION, inputs_mac
    from gymflow.store.sealed_rows import MODEL_CALLS, ROLLOUTS, rows_record
    from gymflow.store.sealed_stores import ledger_file

    key = load_key(create=False)
    assert key is not None
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        task_seal = _task_list_mac(con, key, version)
        inputs = inputs_mac(con, key, INPUTS_VERSION if version >= 5 else 1)
        earlier = {
            spec.record: rows_record(con, key, spec, counted=False)
            for spec in (ROLLOUTS, MODEL_CALLS)
        }
    finally:
        con.close()
    edit_store(
        run,
        f"UPDATE meta SET value = '{_record(key, 0, version=version)}' WHERE key = 'seal'",
        f"UPDATE meta SET value = '{task_seal}' WHERE key = 'task_seal'",
        f"UPDATE meta SET value = '{inputs}' WHERE key = 'inputs_seal'",
        *(
            f"UPDATE meta SET value = '{text}' WHERE key = '{name}'"
            for name, text in earlier.items()
        ),
        "DELETE FROM meta WHERE key = 'generation'",
        "DELETE FROM meta WHERE key = 'store_id'",  # a gymflow before store ids
        *(["DELETE FROM meta WHERE key = 'calls_seal'"] if version < 4 else []),
        *(["DELETE FROM meta WHERE key = 'rollouts_seal'"] if version < 3 else []),
        *(["DELETE FROM meta WHERE key = 'inputs_seal'"] if version < 2 else []),
    )
    later = {"rollouts": 3, "calls": 4, "generation": 5, "counts": 6}
    ledger = ledger_file()
    if ledger.exists():  # what a gymflow of `version` wrote there: no tag of a later one
        kept = [
            line
            for line in ledger.read_text().splitlines(keepends=True)
            if not (
                line.count("\t") == 2
                and line.split("\t")[2].rstrip("\n") in path_names(run / "gymflow.duckdb")
                and later.get(line.split("\t")[1], 0) > version
            )
        ]
        ledger.write_text("".join(kept))
    number = 0
    if version >= 5:
        con = duckdb.connect(str(run / "gymflow.duckdb"))
        try:
            number = 1  # sealed over its records as that gymflow sealed them, with no id
            con.execute(
                "INSERT INTO meta VALUES (?, ?)", [GENERATION_KEY, f"{number}:{_mac(con, key, 1)}"]
            )
        finally:
            con.close()
    forget_generations(key, run / "gymflow.duckdb")
    if number:
        record_at(key, run / "gymflow.duckdb", number)


def forget_generations(key, store: Path) -> None:
    """This machine's record of the generations `store`'s path reached, removed (what no
    gymflow command does: a path's recorded generation never goes down)."""
    from gymflow.store.generations import _file
    from gymflow.store.named_paths import path_names

    for name in path_names(store):
        _file(key.key_id, name).unlink(missing_ok=True)


def one_error_line(stderr: str) -> str:
    """The single `error: ...` line a refused or stopped command ends with: no traceback, no
    second error, nothing wrapped onto another line."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def orphans(store: Path) -> int:
    """Stored rollouts that are not whole: calls missing, or completed without a verification."""
    return query(
        store,
        """
        SELECT count(*) FROM rollouts r
        WHERE num_model_calls <> (SELECT count(*) FROM model_calls c
                                  WHERE c.rollout_id = r.rollout_id)
           OR (status = 'completed' AND NOT EXISTS
               (SELECT 1 FROM verifications v WHERE v.rollout_id = r.rollout_id))
        """,
    )[0][0]


def resealed(store: Path) -> None:
    """Every verdict of `store` sealed again, with this machine's key, over its rollout as
    stored now, and its rollouts and model calls (`sealed_rows.py`): the state a writer would
    have sealed (an edit made by SQL, taken as honest)."""
    from gymflow.store.generations import write_generation
    from gymflow.store.seal_key import load_key, sealed
    from gymflow.store.sealed_rows import SEALED_ROWS, rows_record, rows_recorded
    from gymflow.store.verdict_message import MESSAGE, message_sql

    con = duckdb.connect(str(store))
    try:
        key = load_key(create=True)
        assert key is not None
        for spec in SEALED_ROWS.values():
            if rows_recorded(con, spec):
                con.execute(
                    "UPDATE meta SET value = ? WHERE key = ?",
                    [rows_record(con, key, spec), spec.record],
                )
        seals = sealed(
            con,
            key,
            f"SELECT v.rollout_id, v.verifier_version, {message_sql('v', 'r')} AS {MESSAGE} "
            "FROM verifications v JOIN rollouts r USING (rollout_id)",
        )
        con.register("seals", seals)
        con.execute(
            "UPDATE verifications SET seal = s.seal FROM seals s "
            "WHERE s.rollout_id = verifications.rollout_id "
            "AND s.verifier_version = verifications.verifier_version"
        )
        write_generation(con, key)  # over the records just written, as every writer does
    finally:
        con.close()


def seal_health(run: Path, cwd: Path, *extra: str, gym_command: Any = gym) -> dict:
    """`gym eval health RUN --json`'s exit code, verdict, seal mismatches and when the seals were
    last checked, run by `gym_command` (a `gym` runner); a refusal (one line on stderr, nothing
    vouched for) has no verdict."""
    done = gym_command("eval", "health", str(run), "--json", *extra, cwd=cwd)
    if not done.stdout.strip():
        return {"code": done.returncode, "verdict": None, "mismatch": None, "checked_at": None}
    report = json.loads(done.stdout)
    return {
        "code": done.returncode,
        "verdict": report["verdict"],
        "mismatch": report["checks"]["seal_mismatch"]["count"],
        "checked_at": report["seals_checked_at"],
    }


def imported_copy(run: Path, cwd: Path, gym_command: Any) -> Path:
    """`run` exported for NeMo Gym and imported again by `gym_command` (a `gym` runner), as
    `cwd/imported`: a store gymflow wrote through `gym import nemo-gym`."""
    gym_command("export", str(run), "--format", "nemo-gym", "--out", "rollouts.jsonl", cwd=cwd,
                check=True)  # fmt: skip
    gym_command("import", "nemo-gym", "rollouts.jsonl", "--out", "imported", "--environment",
                "arithmetic", cwd=cwd, check=True)  # fmt: skip
    return cwd / "imported"
