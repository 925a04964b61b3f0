"""The regression gate on runs it cannot compare: a nightly whose every rollout failed, and a
pinned baseline that is a typo, each printed "regression gate passed" and exited 0; and listing
runs wrote its catalog into the run folder."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from gymflow.core.statuses import FAILED
from gymflow.history.gate import gate
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder, reseal
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed

TASKS, REPEATS = 6, 4


def _night(root: Path, night: int, *, all_failed: bool, scored_tasks: int = 0) -> Path:
    """A night: every rollout scored, or (`all_failed`) all but `scored_tasks` tasks' failed."""
    builder = StoreBuilder(RunMeta(run_id=f"night-{night}", model="ckpt", repeats=REPEATS))
    for i in range(TASKS):
        task_id = f"t{i}"
        builder.task(task_id, answer=i)
        for repeat in range(REPEATS):
            if all_failed and i >= scored_tasks:  # the model server was down all night
                builder.rollout(
                    task_id,
                    repeat,
                    status=FAILED,
                    failure_kind="transport_error",
                    verification=None,
                )
            else:
                builder.rollout(task_id, repeat, correct=repeat % 2 == 0)
    run_dir = builder.write(root / f"night-{night}")
    with connect(run_dir) as con:
        con.execute("UPDATE runs SET created_at = ?", [datetime(2026, 1, 1) + timedelta(night)])
        reseal(con)
    return run_dir


def test_a_night_with_nothing_scored_does_not_pass_the_gate(tmp_path: Path) -> None:
    _night(tmp_path, 0, all_failed=False)
    dead = _night(tmp_path, 1, all_failed=True)
    verdict = gate(dead)
    (previous,) = verdict.checks
    assert previous.why.startswith("not compared")
    assert not verdict.passed, verdict.summary()
    assert "passed" not in verdict.summary()


def test_a_baseline_that_is_not_a_run_fails_the_gate_in_the_cli(tmp_path: Path) -> None:
    _night(tmp_path, 0, all_failed=False)
    out = gym("runs", "gate", "night-0", "--baseline", "no-such-run", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no-such-run" in out.stdout and "not compared" in out.stdout
    assert "passed" not in out.stdout.split("\n")[0]


def test_a_night_that_mostly_failed_does_not_pass_the_gate(tmp_path: Path) -> None:
    """The model server died after the first task: 20 of 24 rollouts failed, and the gate,
    pairing on the one task both nights scored, printed "regression gate passed: +0.0 points
    over 1 tasks" and exited 0, though health calls the night unhealthy."""
    _night(tmp_path, 0, all_failed=False)
    _night(tmp_path, 1, all_failed=True, scored_tasks=1)
    out = gym("runs", "gate", "night-1", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stdout.split())
    assert said.startswith("regression gate FAILED: the run is unhealthy (failed_share)"), said
    assert "over 1 tasks" in said  # the comparison is still stated
    healthy = gym("runs", "gate", "night-0", cwd=tmp_path)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr


def _tree(root: Path) -> dict[str, tuple[bytes, float]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_listing_runs_writes_nothing_into_the_run_folder(tmp_path: Path) -> None:
    """`gym runs list DIR` wrote `catalog.duckdb` into DIR, the user's (perhaps shared) run
    folder. The folder is byte for byte as it was after listing twice, the catalog is a
    queryable file in the user's cache, and the second listing reads the same runs from it."""
    root = tmp_path / "runs"
    for night in range(2):
        _night(root, night, all_failed=False)
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    before = _tree(root)
    first = json.loads(gym("runs", "list", str(root), "--json", cwd=tmp_path, env=env,
                           check=True).stdout)  # fmt: skip
    second = json.loads(gym("runs", "list", str(root), "--json", cwd=tmp_path, env=env,
                            check=True).stdout)  # fmt: skip
    assert _tree(root) == before
    assert Path(first["catalog"]).is_relative_to(cache / "gymflow" / "catalogs")
    assert first == second and len(first["runs"]) == 2
    with duckdb.connect(first["catalog"], read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    shown = gym("runs", "list", str(root), cwd=tmp_path, env=env, check=True).stdout
    assert "night-0" in shown and first["catalog"] in " ".join(shown.split())


def test_listing_runs_without_a_usable_cache_still_lists_them(tmp_path: Path) -> None:
    """A cache folder open to others is not used (nothing is written there either): the runs
    are listed from their stores, and no catalog path is offered."""
    root = tmp_path / "runs"
    _night(root, 0, all_failed=False)
    shared = tmp_path / "shared-cache"
    (shared / "gymflow" / "catalogs").mkdir(parents=True, mode=0o777)
    (shared / "gymflow" / "catalogs").chmod(0o777)
    before = _tree(root)
    out = gym("runs", "list", str(root), "--json", cwd=tmp_path,
              env={"XDG_CACHE_HOME": str(shared)}, check=True)  # fmt: skip
    listed = json.loads(out.stdout)
    assert listed["catalog"] is None and [r["run_id"] for r in listed["runs"]] == ["night-0"]
    assert list((shared / "gymflow" / "catalogs").iterdir()) == []
    assert _tree(root) == before


@pytest.mark.parametrize(
    "replace",
    [
        "CREATE TABLE runs (run_dir INTEGER)",  # another gymflow version's columns
        "CREATE TABLE runs (run_dir VARCHAR, extra VARCHAR)",
        "CREATE VIEW runs AS SELECT 1 AS x",
    ],
    ids=["fewer_columns", "other_columns", "view"],
)
def test_a_catalog_of_another_shape_is_rebuilt_from_the_stores(tmp_path: Path, replace) -> None:
    """The catalog is a cache in the user's folder: one whose `runs` is not this version's
    table (an older gymflow's, an edit) made every `gym runs list` a BinderException until the
    file was deleted. It is rebuilt from the stores; the run folder is untouched."""
    root = tmp_path / "runs"
    _night(root, 0, all_failed=False)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    listed = lambda: gym("runs", "list", str(root), "--json", cwd=tmp_path, env=env)  # noqa: E731
    first = json.loads(listed().stdout)
    with duckdb.connect(first["catalog"]) as con:
        con.execute("DROP TABLE runs")
        con.execute(replace)
    before = _tree(root)
    again = listed()
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout) == first
    assert _tree(root) == before


def test_an_edited_baseline_fails_the_gate(tmp_path: Path) -> None:
    """An attacker's pass (a13, a13b): the gate recomputed every seal of the candidate and none
    of the baseline's; failing the baseline's passing verdicts turned a drop into a gain, and
    the gate passed. Every run the candidate is compared with is now checked as it is."""
    _night(tmp_path, 0, all_failed=False)
    _night(tmp_path, 1, all_failed=False)
    honest = gym("runs", "gate", "night-1", cwd=tmp_path)
    assert honest.returncode == 0, honest.stdout + honest.stderr
    con = duckdb.connect(str(tmp_path / "night-0" / "gymflow.duckdb"))
    con.execute(
        "UPDATE verifications SET passed = false, reward = 0"
    )  # the seals left as they were
    con.close()
    out = gym("runs", "gate", "night-1", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stdout.split())
    assert "a run it is compared with cannot be trusted" in said, said
    assert f"{tmp_path / 'night-0'}: seal_mismatch" in said, said
