"""Stores gymflow wrote but never recorded as sealed (issue 42, attacker's pass over 193679f): a
merged run's store (local shards and shards at a URL alike) got no seal record and was never
added to the sealed-stores list, and `gym import nemo-gym` added its temporary path
(`.NAME.importing-PID/...`), not the final one. Nulling every seal and passing every verdict
then read as a store from before the seal: pass@1 59% -> 100%, healthy, a `verdict_unsealed`
warning only. Now every store gymflow writes is recorded at its final path, and the same edit
fails `seal_stripped`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gymflow.store.seal_key import load_key
from gymflow.store.sealed_stores import ledger_file
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    imported_copy,
    rollout_rows,
    tree_digest,
)

#: The attack: every seal and the seal record removed, every verdict a pass.
STRIPPED = (
    "UPDATE verifications SET seal = NULL, passed = true, reward = 1",
    "DELETE FROM meta WHERE key IN ('seal', 'task_seal', 'inputs_seal')",
)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run every test here but the merge's starts from a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


def _ledger() -> list[str]:
    key = load_key(create=False)
    assert key is not None
    lines = ledger_file().read_text().splitlines()
    return [line.split("\t", 1)[1] for line in lines if line.startswith(key.key_id + "\t")]


def _health(run: Path, cwd: Path) -> tuple[int, str, list[str], list[str]]:
    done = gym("eval", "health", str(run), "--json", cwd=cwd)
    report = json.loads(done.stdout)
    return done.returncode, report["verdict"], report["gate_failures"], report["warnings"]


def _stripped_fails(run: Path, cwd: Path, *, recheck: bool = True) -> None:
    """The store is listed at its own path; stripped, it fails `seal_stripped`, and the
    profile's pass@1 the attack wanted (1.0) comes with an unhealthy verdict."""
    assert os.path.realpath(run / "gymflow.duckdb") in _ledger()
    before = json.loads(gym("eval", "profile", str(run), "--json", cwd=cwd, check=True).stdout)
    assert _health(run, cwd)[:2] == (0, "healthy") and before["pass@1"] < 1.0
    edit_store(run, *STRIPPED)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    code, verdict, failures, _ = _health(run, cwd)
    assert (code, verdict) == (2, "unhealthy") and "seal_stripped" in failures, failures
    if recheck:  # an import's own version ("imported") has no verifier to judge again with
        checked = gym("eval", "reverify", str(run), "--check", cwd=cwd)
        assert checked.returncode == 2, checked.stdout + checked.stderr
        assert "lost their seals" in " ".join(checked.stdout.split())
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def test_a_merged_run_store_is_recorded_and_stripped_fails(tmp_path: Path) -> None:
    shards = [collect_run(tmp_path / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]
    merged = tmp_path / "merged"
    gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path, check=True)
    _stripped_fails(merged, tmp_path)


def test_an_import_is_recorded_at_its_final_path_never_the_staging_one(
    honest: Path, tmp_path: Path
) -> None:
    run = copied_run(honest, tmp_path / "source")
    imported = imported_copy(run, tmp_path, gym)
    assert not [path for path in _ledger() if ".importing-" in path]
    _stripped_fails(imported, tmp_path, recheck=False)


def test_a_copy_gymflow_makes_of_a_sealed_store_is_recorded(honest: Path, tmp_path: Path) -> None:
    """A study's arm starts from a copy of its base run's store (`db.copy_store`)."""
    from gymflow.store.db import copy_store

    run = copied_run(honest, tmp_path / "base")
    copy_store(run, tmp_path / "arm")
    _stripped_fails(tmp_path / "arm", tmp_path)


def test_a_compacted_store_stays_recorded(honest: Path, tmp_path: Path) -> None:
    """compact rewrites the store into a fresh file renamed over it: the same path."""
    from gymflow.store.compact import compact

    run = copied_run(honest, tmp_path / "run")
    assert compact(run, min_free_share=0.0, min_free_bytes=0).rewritten
    _stripped_fails(run, tmp_path)


def test_a_stripped_store_moved_elsewhere_then_back_still_fails(
    honest: Path, tmp_path: Path
) -> None:
    run = copied_run(honest, tmp_path / "run")
    shutil.move(run, tmp_path / "away")
    shutil.move(tmp_path / "away", run)
    _stripped_fails(run, tmp_path)
