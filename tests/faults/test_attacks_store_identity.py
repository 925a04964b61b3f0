"""Another of the owner's sealed stores copied over a run's store (attack pass 8, F1).

The sealed-stores ledger and the generation recorded for a path bound trust to (path, counter),
never to which store was sealed there. On main, with the simulated policy here (15 tasks): a weak
experiment (pass@1 20.0%) whose generation a routine `reverify --set` raised to the baseline's
(2 -> 3), copied with one `cp` over the nightly root's baseline (100.0%), turned `gym runs gate`
on tonight's run (46.7%) from "FAILED: vs baseline: -53.3 points" (exit 2) into "passed: +26.7
points" (exit 0), the baseline "healthy" (exit 0), `reverify --check` exit 0; last night's store
copied over tonight's made tonight read 100.0% for 46.7%, healthy, and the gate said "nothing
to compare with", exit 0.

Now every store holds an id drawn when its history begins, sealed with its generation and
recorded with its path (`store_ids.py`): the store at the baseline's path is another store,
`seal_rolled_back`; health, `--check` and the gate fail (exit 2), a writer refuses in one line
naming both ids. Stores from before ids open, and are bound by their next writer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import (
    collect_run,
    edit_store,
    forget_generations,
    one_error_line,
    query,
    tree_digest,
)

TASKS = 15


def _run(out: Path, skill: float) -> Path:
    return collect_run(out, limit=TASKS, repeats=1, model={"simulate": {"skill": skill}})


def _gate(run: Path, cwd: Path) -> tuple[int, str]:
    done = gym("runs", "gate", str(run), cwd=cwd)
    return done.returncode, " ".join(done.stdout.split())


def _health(run: Path, cwd: Path) -> tuple[int, str, list[str]]:
    done = gym("eval", "health", str(run), "--verify-seals", "--json", cwd=cwd)
    report = json.loads(done.stdout)
    return done.returncode, report["verdict"], sorted(report["gate_failures"])


def _pass1(run: Path, cwd: Path) -> float:
    done = gym("eval", "profile", str(run), "--json", cwd=cwd)
    return json.loads(done.stdout)["pass@1"]


def _generation(run: Path) -> int:
    found = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'generation'")
    return int(str(found[0][0]).split(":")[0])


def _copy_over(source: Path, run: Path) -> None:
    """The attacker's `cp` of another store over the run's (the same inode), the gate's verdict
    beside it removed."""
    shutil.copyfile(source / "gymflow.duckdb", run / "gymflow.duckdb")
    (run / "gate.json").unlink(missing_ok=True)


def owners_runs(tmp_path: Path) -> tuple[Path, Path, Path, float]:
    """The owner's weak experiment and two nights (a good baseline n1, tonight's n2, whose gate
    fails), then the owner's routine what-if on the experiment, which raises its generation to
    the baseline's or past it: (weak, n1, n2, the experiment's pass@1)."""
    weak = _run(tmp_path / "experiments" / "weak", 0.2)
    n1 = _run(tmp_path / "nightly" / "n1", 0.9)
    n2 = _run(tmp_path / "nightly" / "n2", 0.5)
    weak_pass, good, tonight = _pass1(weak, tmp_path), _pass1(n1, tmp_path), _pass1(n2, tmp_path)
    assert weak_pass < tonight < good, (weak_pass, tonight, good)
    code, said = _gate(n2, tmp_path)
    assert code == 2 and said.startswith("regression gate FAILED: vs baseline: -"), said
    gym("eval", "reverify", str(weak), "--set", "extract=last_number", cwd=tmp_path)
    assert _generation(weak) >= _generation(n1)
    return weak, n1, n2, weak_pass


def test_another_sealed_store_copied_over_the_baseline_is_refused(tmp_path: Path) -> None:
    weak, n1, n2, weak_pass = owners_runs(tmp_path)

    _copy_over(weak, n1)  # the attacker: one `cp`, no key
    stored = tree_digest(n1)
    assert _pass1(n1, tmp_path) == weak_pass
    assert _health(n1, tmp_path) == (2, "unhealthy", ["seal_rolled_back"])
    assert gym("eval", "reverify", str(n1), "--check", cwd=tmp_path).returncode == 2
    code, said = _gate(n2, tmp_path)
    assert code == 2 and said.startswith("regression gate FAILED"), said
    assert "passed" not in said.split(":")[0] and "seal_rolled_back" in said, said
    # the root's trend leaves it out, with why
    trend = gym(
        "runs", "trend", "arithmetic-smoke", "--root", str(n1.parent), "--json", cwd=tmp_path
    )
    (left,) = json.loads(trend.stdout)["left_out"]
    assert left["run_dir"] == str(n1) and "another store put at this path" in left["why"]
    # a writer refuses, in one line naming the path, both ids and what to do
    current = query(n1 / "gymflow.duckdb", "SELECT verifier_version FROM runs")[0][0]
    done = gym("eval", "use-version", str(n1), current, cwd=tmp_path)
    refusal = one_error_line(done.stderr)
    assert done.returncode == 2 and "another store put at this path" in refusal, refusal
    assert str(n1) in refusal and "move this one to a folder of its own" in refusal
    (weak_id,) = query(weak / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'store_id'")
    assert f"this store holds {weak_id[0]}" in refusal
    assert tree_digest(n1) == stored

    # moved to a folder of its own, the experiment's copy opens (and counts in no root)
    shutil.move(n1, tmp_path / "kept")
    assert _health(tmp_path / "kept", tmp_path)[0] == 0


def test_last_nights_store_copied_over_tonights_is_refused(tmp_path: Path) -> None:
    n1 = _run(tmp_path / "nightly" / "n1", 0.9)
    n2 = _run(tmp_path / "nightly" / "n2", 0.5)
    tonight, last_night = _pass1(n2, tmp_path), _pass1(n1, tmp_path)
    assert tonight < last_night
    _copy_over(n1, n2)
    assert _pass1(n2, tmp_path) == last_night  # last night's numbers, under tonight's name
    assert _health(n2, tmp_path) == (2, "unhealthy", ["seal_rolled_back"])
    code, said = _gate(n2, tmp_path)
    assert code == 2 and said.startswith("regression gate FAILED"), said


def _as_before_ids(run: Path) -> None:
    """The store and its path's record as the gymflow before store ids left them: no id in the
    store (its generation sealed without one) nor with the path's generation."""
    from gymflow.store.generations import GENERATION_KEY, _mac, record_at
    from gymflow.store.seal_key import load_key

    key = load_key(create=False)
    assert key is not None
    store, number = run / "gymflow.duckdb", _generation(run)
    edit_store(run, "DELETE FROM meta WHERE key = 'store_id'")
    con = duckdb.connect(str(store))
    try:
        sealed = f"{number}:{_mac(con, key, number)}"
        con.execute("UPDATE meta SET value = ? WHERE key = ?", [sealed, GENERATION_KEY])
    finally:
        con.close()
    forget_generations(key, store)
    record_at(key, store, number)


def _ids(run: Path) -> tuple[str | None, str | None]:
    """The id the run's store holds, and the one recorded with its path."""
    from gymflow.store.generations import recorded_store_at
    from gymflow.store.seal_key import load_key

    key = load_key(create=False)
    assert key is not None
    held = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'store_id'")
    return (held[0][0] if held else None), recorded_store_at(key, run / "gymflow.duckdb").store_id


def test_a_store_from_before_ids_opens_and_its_next_writer_binds_it(tmp_path: Path) -> None:
    """A store and a path record the gymflow before ids left open as before; the next writer
    draws the store's id and records it. A store WITH an id copied over a path written to before
    ids is another store: its id was drawn, and recorded, elsewhere."""
    old = _run(tmp_path / "nightly" / "old", 0.9)
    other = _run(tmp_path / "nightly" / "other", 0.5)
    _as_before_ids(old)
    assert _ids(old) == (None, None)
    assert _health(old, tmp_path) == (0, "healthy", [])
    current = query(old / "gymflow.duckdb", "SELECT verifier_version FROM runs")[0][0]
    done = gym("eval", "use-version", str(old), current, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    held, recorded = _ids(old)
    assert held is not None and held == recorded
    assert _health(old, tmp_path) == (0, "healthy", [])

    _as_before_ids(old)
    _copy_over(other, old)
    assert _health(old, tmp_path) == (2, "unhealthy", ["seal_rolled_back"])
