"""Stores reached through links, and shards swapped under a merge (attack pass 4 over 56998a2):

- a06: the run's store file replaced by a link to a copy stripped of its seals and forged read
  as a store never sealed (the ledger knew the store by its real path only): pass@1 0.60 ->
  1.00, healthy. The ledger now lists a store by the path it was opened at and by its real
  path; either listed and unsealed is `seal_stripped`.
- a01: a shard folder replaced by a link to a stripped, forged copy was merged as "verdicts from
  before the seal" and sealed whole into the run store. A shard holding rollouts must be sealed
  by this machine's key.
- a02: the merge checked each shard at its path, then attached that path again later; a store
  put there in between (a view reading the seal key with `read_text`) ran in the merge. The merge
  now checks and copies a private snapshot of each shard."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from gymflow.rollouts import merge as merging
from gymflow.store.seal_key import key_file
from tests.conftest import gym_in_process as gym
from tests.faults.stores import collect_run, copied_run, edit_store, rollout_rows, tree_digest

#: A forgery without the key: failing outputs and verdicts passed, every seal and record gone.
FORGED = (
    "UPDATE verifications SET seal = NULL, passed = true, reward = 1",
    "DELETE FROM meta WHERE key IN ('seal', 'task_seal', 'inputs_seal', 'rollouts_seal')",
)


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run and the two shards of one, collected once: each test attacks copies."""
    root = tmp_path_factory.mktemp("collected")
    shards = {f"shard{i}": collect_run(root / f"shard{i}", shard={"index": i, "count": 2})
              for i in range(2)}  # fmt: skip
    return {"run": collect_run(root / "run"), **shards}


def _health(run: Path, cwd: Path) -> tuple[int, str, list[str]]:
    done = gym("eval", "health", str(run), "--json", cwd=cwd)
    report = json.loads(done.stdout)
    return done.returncode, report["verdict"], report["gate_failures"]


def _pass_at_1(run: Path, cwd: Path) -> float:
    return json.loads(gym("eval", "profile", str(run), "--json", cwd=cwd).stdout)["pass@1"]


def test_a_store_replaced_by_a_link_to_a_stripped_copy_is_stripped(
    collected: dict[str, Path], tmp_path: Path
) -> None:
    run = copied_run(collected["run"], tmp_path / "run")
    honest = _pass_at_1(run, tmp_path)
    assert honest < 1.0 and _health(run, tmp_path)[:2] == (0, "healthy")
    shadow = run / ".shadow.duckdb"
    shutil.copyfile(run / "gymflow.duckdb", shadow)
    (run / "gymflow.duckdb").unlink()
    (run / "gymflow.duckdb").symlink_to(shadow.name)
    edit_store(run, *FORGED)
    stored, digest = rollout_rows(shadow), tree_digest(run)
    code, verdict, failures = _health(run, tmp_path)
    assert (code, verdict) == (2, "unhealthy") and "seal_stripped" in failures, failures
    # the owner's next write is refused, not sealed over the forgery: a writer opens no store
    # file that is a link (its writes would land in the file it names)
    done = gym("eval", "reverify", str(run), "--set", "rel_tol=1e-9", cwd=tmp_path)
    assert done.returncode == 1 and "a link, or a file with other names" in done.stderr
    assert rollout_rows(shadow) == stored and tree_digest(run) == digest


def _shards(collected: dict[str, Path], tmp_path: Path) -> list[Path]:
    return [copied_run(collected[f"shard{i}"], tmp_path / f"shard{i}") for i in range(2)]


def test_a_shard_linked_to_a_stripped_copy_is_refused(
    collected: dict[str, Path], tmp_path: Path
) -> None:
    shards = _shards(collected, tmp_path)
    honest = tmp_path / "honest"
    gym("eval", "aggregate", *map(str, shards), "--out", str(honest), cwd=tmp_path, check=True)
    elsewhere = tmp_path / "elsewhere" / "shard1"
    shutil.copytree(shards[1], elsewhere)
    edit_store(elsewhere, *FORGED)
    shutil.rmtree(shards[1])
    shards[1].symlink_to(elsewhere)
    merged = tmp_path / "merged"
    done = gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path)
    assert done.returncode != 0 and "not sealed by this machine's key" in done.stderr
    assert not (merged / "gymflow.duckdb").exists()
    assert _pass_at_1(honest, tmp_path) < 1.0


def test_a_shard_swapped_after_its_check_is_not_what_is_merged(
    collected: dict[str, Path], tmp_path: Path, monkeypatch
) -> None:
    """The swap the attacker timed with inotify, made here between the shards' check and the
    copy: a store whose `rollouts` is a view reading the seal key. The merge copies what it
    checked; the key is nowhere in the run store."""
    shards = _shards(collected, tmp_path)
    evil = tmp_path / "evil.duckdb"
    shutil.copyfile(shards[1] / "gymflow.duckdb", evil)
    con = duckdb.connect(str(evil))
    con.execute("ALTER TABLE rollouts RENAME TO r0")
    con.execute(
        "CREATE VIEW rollouts AS SELECT * REPLACE ("
        f"(SELECT string_agg(content, '') FROM read_text('{key_file()}')) AS error) FROM r0"
    )
    con.close()
    checked = merging.read_shards

    def swap_after_check(*args, **kwargs):
        found = checked(*args, **kwargs)
        os.replace(evil, shards[1] / "gymflow.duckdb")
        return found

    monkeypatch.setattr(merging, "read_shards", swap_after_check)
    merged = tmp_path / "merged"
    report = merging.merge_shards(merged, shards)
    assert report.complete
    key = key_file().read_text().strip()
    con = duckdb.connect(str(merged / "gymflow.duckdb"), read_only=True)
    try:
        leaked = con.execute(
            "SELECT count(*) FROM rollouts WHERE contains(coalesce(error, ''), ?)", [key]
        ).fetchone()[0]
    finally:
        con.close()
    assert leaked == 0
    assert _health(merged, tmp_path)[:2] == (0, "healthy")
