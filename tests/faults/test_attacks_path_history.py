"""A path's recorded generation never goes down (issue 42, attacker's pass 7, s08).

The nightly run goes into the same folder every night: the owner removes last night's and runs
again. A new store first sealed at a path *reset* the generation this machine recorded there to
its own (`generations.fresh_history`), and every store gymflow ever sealed there has a
generation at least that high. So the attacker's copy of last night's store (a good model),
written over tonight's (a much weaker one), read as current: on main, with the simulated policy
here, tonight's pass@1 5.0% became last night's 60.0%; `gym eval health --verify-seals` exit 0
"healthy"; profile exit 0; `reverify --check` exit 0; `gym runs gate tonight --baseline base`
went from "FAILED: -55.0 points" (exit 2) to "passed: +0.0 points" (exit 0); and the writer
`use-version` accepted the store and sealed it as current (exit 0). The same reset happened at
an import renamed into place and a merge into a folder (and a study arm's copy and a restored
shard: test_attacks_rollback.py).

Now a store that begins a history at a path starts above what was recorded there: every earlier
store at that path, of whatever run, reads `seal_rolled_back`; health and profile exit 2,
`--check` exit 2, the gate FAILED (the run is unhealthy), every writer refuses, nothing written.
Re-running into the removed folder itself still opens healthy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import (
    collect_run,
    imported_copy,
    one_error_line,
    query,
    rollout_rows,
    tree_digest,
)

WEAK = {"model": {"simulate": {"skill": 0.05}}}
#: Tasks of a night: at 10 a 50-point drop is within the gate's single-night limit (t -3.35)
NIGHT_TASKS = 20


def _numbers(run: Path, cwd: Path) -> dict:
    """What health (every seal recomputed), profile and `reverify --check` say of the run."""
    checked = gym("eval", "health", str(run), "--verify-seals", "--json", cwd=cwd)
    report = json.loads(checked.stdout)
    read = gym("eval", "profile", str(run), "--json", cwd=cwd)
    recheck = gym("eval", "reverify", str(run), "--check", cwd=cwd)
    return {
        "health": (checked.returncode, report["verdict"], sorted(report["gate_failures"])),
        "profile": (read.returncode, json.loads(read.stdout)["pass@1"]),
        "check": recheck.returncode,
    }


def _gate(run: Path, baseline: Path, cwd: Path) -> tuple[int, str]:
    done = gym("runs", "gate", str(run), "--baseline", str(baseline), cwd=cwd)
    return done.returncode, " ".join(done.stdout.split())


def _put_back(run: Path, older: bytes) -> None:
    """The attacker's copy written over the store's file (`cp`: the same inode), and the gate
    verdict beside it removed."""
    with (run / "gymflow.duckdb").open("r+b") as store:
        store.write(older)
        store.truncate()
    (run / "gate.json").unlink(missing_ok=True)


def test_last_nights_store_put_back_over_tonights_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "nightly-root"
    base = collect_run(root / "baseline", limit=NIGHT_TASKS)
    night = collect_run(root / "nightly", limit=NIGHT_TASKS)
    last_night = (night / "gymflow.duckdb").read_bytes()
    honest = _numbers(night, tmp_path)
    assert honest["health"] == (0, "healthy", []) and honest["check"] == 0
    # the owner: tonight's run replaces last night's in the same folder, a much weaker model
    shutil.rmtree(night)
    collect_run(night, limit=NIGHT_TASKS, **WEAK)
    tonight = _numbers(night, tmp_path)
    assert tonight["health"] == (0, "healthy", []) and tonight["check"] == 0
    assert tonight["profile"] == (0, 0.05) and honest["profile"] == (0, 0.6)
    code, said = _gate(night, base, tmp_path)
    assert code == 2 and said.startswith("regression gate FAILED: vs baseline: -55.0 points"), said

    # the attacker: last night's store back in place of tonight's
    _put_back(night, last_night)
    stored, digest = rollout_rows(night / "gymflow.duckdb"), tree_digest(night)
    after = _numbers(night, tmp_path)
    assert after["health"] == (2, "unhealthy", ["seal_rolled_back"]), after
    assert after["profile"] == (2, 0.6) and after["check"] == 2, after
    code, said = _gate(night, base, tmp_path)
    assert code == 2, said
    assert said.startswith("regression gate FAILED: the run is unhealthy (seal_rolled_back)")
    current = query(night / "gymflow.duckdb", "SELECT verifier_version FROM runs")[0][0]
    done = gym("eval", "use-version", str(night), current, cwd=tmp_path)
    refusal = one_error_line(done.stderr)
    assert done.returncode == 2 and "an older copy of it was put back" in refusal, refusal
    (night / "gate.json").unlink(missing_ok=True)  # the gate's own verdict, written above
    assert rollout_rows(night / "gymflow.duckdb") == stored and tree_digest(night) == digest

    # re-running into the removed folder itself is a new history there, and opens
    shutil.rmtree(night)
    collect_run(night, limit=NIGHT_TASKS, **WEAK)
    assert _numbers(night, tmp_path) == tonight


def test_an_import_or_a_merge_over_a_removed_store_starts_above_it(tmp_path: Path) -> None:
    """An import renamed into a folder (built aside, then `record_at` its final path) and a
    merge into one (rows copied into an empty store) began their history there at their own
    generation, and the store removed from that folder read as current when put back."""
    good = collect_run(tmp_path / "good", limit=10)
    imported = imported_copy(good, tmp_path, gym)
    removed = (imported / "gymflow.duckdb").read_bytes()
    shutil.rmtree(imported)
    (tmp_path / "rollouts.jsonl").unlink()
    imported_copy(collect_run(tmp_path / "weak", limit=10, **WEAK), tmp_path, gym)
    weak = gym("eval", "profile", str(imported), "--json", cwd=tmp_path)
    assert (weak.returncode, json.loads(weak.stdout)["pass@1"]) == (0, 0.1)
    _put_back(imported, removed)
    checked = gym("eval", "health", str(imported), "--verify-seals", "--json", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout
    assert json.loads(checked.stdout)["gate_failures"] == ["seal_rolled_back"]
    read = gym("eval", "profile", str(imported), "--json", cwd=tmp_path)
    assert (read.returncode, json.loads(read.stdout)["pass@1"]) == (2, 0.6)

    shards = [
        collect_run(tmp_path / f"shard{i}", limit=10, shard={"index": i, "count": 2})
        for i in range(2)
    ]
    merged = tmp_path / "merged"
    gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path, check=True)
    removed = (merged / "gymflow.duckdb").read_bytes()
    shutil.rmtree(merged)
    gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path, check=True)
    assert _numbers(merged, tmp_path)["health"] == (0, "healthy", [])
    _put_back(merged, removed)
    after = _numbers(merged, tmp_path)
    assert after["health"] == (2, "unhealthy", ["seal_rolled_back"]) and after["check"] == 2


def test_a_copy_gymflow_makes_of_a_source_put_back_is_refused_as_the_source_is(
    tmp_path: Path,
) -> None:
    """A copy gymflow makes (a study's arm) starts above what was recorded where it goes only
    when its source is at its latest state: a source put back to an older state is not raised
    into a new history by being copied."""
    from gymflow.store.db import copy_store

    base = collect_run(tmp_path / "base", limit=4)
    older = (base / "gymflow.duckdb").read_bytes()
    gym("eval", "reverify", str(base), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    _put_back(base, older)
    assert _numbers(base, tmp_path)["health"] == (2, "unhealthy", ["seal_rolled_back"])
    arm = tmp_path / "arm"
    copy_store(base, arm)
    assert (arm / "gymflow.duckdb").read_bytes() == older  # no generation written into it
    assert _numbers(arm, tmp_path)["health"] == (2, "unhealthy", ["seal_rolled_back"])
