"""Compaction copies only a store it checked (issue 42 items 2 and 3; attack pass 4, not tried).

At the end of `gym eval run` the store is copied into a fresh file that takes its name. The copy
ATTACHed the store by its path with no check and `COPY FROM DATABASE` carried whatever it held:
an object of the attacker's (a view reading the seal key with `read_text`), a table that is not
gymflow's, verdicts edited without the key. Now it opens the store as every reader does (no
foreign object, the exact schema) and checks its seals as every writer does, then copies from
that same connection; a store that fails is refused, naming it, and nothing is written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gymflow.core.errors import GymflowError
from gymflow.store.compact import compact
from gymflow.store.seal_key import key_file
from tests.conftest import gym_in_process as gym
from tests.faults.stores import collect_run, edit_store, rollout_rows

ATTACKS = {
    "view": (
        f"CREATE VIEW notes AS SELECT content FROM read_text('{key_file()}')",
        "holds objects gymflow did not create (view 'notes')",
    ),
    "macro": ("CREATE MACRO sum(x) AS count(x)", "holds objects gymflow did not create"),
    "schema": (
        "ALTER TABLE verifications ADD COLUMN note VARCHAR DEFAULT 'x'",
        "not gymflow's schema",
    ),
    "verdicts": (
        "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
        "verdicts do not match their seal",
    ),
}


def _health(run: Path, cwd: Path) -> tuple[int, object]:
    """`gym eval health`'s exit code and verdict with its gate failures, or its refusal."""
    done = gym("eval", "health", str(run), "--json", cwd=cwd)
    if not done.stdout.strip():
        return done.returncode, done.stderr
    report = json.loads(done.stdout)
    return done.returncode, (report["verdict"], report["gate_failures"])


def _file(run: Path) -> tuple[int, str]:
    store = run / "gymflow.duckdb"
    return store.stat().st_ino, hashlib.sha256(store.read_bytes()).hexdigest()


def test_an_honest_store_is_compacted_with_the_same_rows(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run")
    rows, inode = rollout_rows(run / "gymflow.duckdb"), _file(run)[0]
    assert compact(run, min_free_share=0.0, min_free_bytes=0).rewritten
    assert _file(run)[0] != inode and rollout_rows(run / "gymflow.duckdb") == rows
    assert _health(run, tmp_path) == (0, ("healthy", []))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_store_that_fails_a_check_is_refused_and_left_as_it_is(
    attack: str, tmp_path: Path
) -> None:
    run = collect_run(tmp_path / "run")
    sql, refusal = ATTACKS[attack]
    edit_store(run, sql)
    before, rows, health = _file(run), rollout_rows(run / "gymflow.duckdb"), _health(run, tmp_path)
    listed = sorted(p.name for p in run.iterdir())

    with pytest.raises(GymflowError) as refused:
        compact(run, min_free_share=0.0, min_free_bytes=0)
    said = str(refused.value)
    assert said.startswith(str(run / "gymflow.duckdb")) and refusal in said, said
    assert "\n" not in said
    # nothing written: the same file (inode and bytes), no partial, the same answers
    assert _file(run) == before and sorted(p.name for p in run.iterdir()) == listed
    assert rollout_rows(run / "gymflow.duckdb") == rows
    assert _health(run, tmp_path) == health
