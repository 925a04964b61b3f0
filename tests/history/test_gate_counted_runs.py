"""Which runs count in a root's history, for the regression gate (issue 42, attacker's pass 7,
s09).

`gym runs gate RUN` without --baseline pins the earliest run of the benchmark version under the
root, and every run between it and tonight feeds the CUSUM. The owner's own older weak run,
sealed in another folder, copied into the nightly root with `cp -r` (no key, no store edited),
is a checkable store dated before every night: on main it became the pinned baseline, and
tonight's "regression gate FAILED: vs baseline: -40.0 points" (exit 2) read "passed: vs
baseline: +15.0 points" (exit 0). Copies fed the CUSUM once each: three hand copies of a good
run took tonight's CUSUM from 3.03 (3 runs since the baseline) to 1.52 (6 runs).

Now a run counts only at a path where this machine's key sealed it (the sealed-stores ledger),
and one run (its run id and when it was made: what a byte copy keeps) counts once; the gate
names each run it left out, and why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gymflow.history.counted import NOT_SEALED_HERE
from gymflow.history.gate import gate
from gymflow.store.db import copy_store
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.history.runs import dated_run


def _gated(run: Path, cwd: Path) -> tuple[int, dict, str]:
    """The gate as a user runs it, default baseline: exit code, JSON verdict, and the line."""
    as_json = gym("runs", "gate", str(run), "--json", cwd=cwd)
    said = gym("runs", "gate", str(run), cwd=cwd)
    assert said.returncode == as_json.returncode, said.stdout
    return as_json.returncode, json.loads(as_json.stdout), " ".join(said.stdout.split())


def test_a_copy_of_an_older_weak_run_is_not_the_pinned_baseline(tmp_path: Path) -> None:
    weak = dated_run(tmp_path / "dev" / "weak-experiment", "weak", passing=1, day=0)  # 5%
    root = tmp_path / "nightly"
    first = dated_run(root / "night-01", "night-01", passing=12, day=1)  # 60%
    tonight = dated_run(root / "night-02", "night-02", passing=4, day=2)  # 20%
    code, verdict, said = _gated(tonight, tmp_path)
    (check,) = verdict["checks"]
    assert code == 2 and check["run_dir"] == str(first)
    assert said.startswith("regression gate FAILED: vs baseline: -40.0 points over 20 tasks")
    assert "t -3.56" in said and "left out" not in said

    # the attacker: the owner's weak run, copied into the root (the copy is dated day 0)
    copy = root / "night-00"
    shutil.copytree(weak, copy)
    healthy = gym("eval", "health", str(copy), "--verify-seals", cwd=tmp_path)
    assert healthy.returncode == 0  # the copy is checkable: this key sealed it, elsewhere
    code, verdict, said = _gated(tonight, tmp_path)
    (check,) = verdict["checks"]
    # on main: exit 0, "regression gate passed: vs baseline: +15.0 points", baseline night-00
    assert code == 2 and check["run_dir"] == str(first), said
    assert check["difference"] == -0.4 and check["runs_in_sequence"] == 1
    assert said.startswith("regression gate FAILED: vs baseline: -40.0 points over 20 tasks")
    why = "not sealed at this path by this machine's key: a copy made elsewhere, or another's run"
    assert verdict["left_out"] == [f"{copy} ({why})"]
    assert f"a drop beyond the 2.0-point margin; left out of the history: {copy} ({why})" in said
    # the owner's own run is still the baseline when named
    named = gym("runs", "gate", str(tonight), "--baseline", str(weak), cwd=tmp_path)
    assert named.returncode == 0 and "passed: vs baseline: +15.0 points" in named.stdout
    # the copy is no older than that baseline: it would not have counted, and is not named
    assert "left out" not in named.stdout


def test_copies_do_not_feed_the_cusum_and_a_run_counts_once(tmp_path: Path) -> None:
    """Two drifting nights raise the CUSUM; the owner's good run made in between in another
    folder, copied by hand three times into the root, fed it three nights of no drop (each
    taking 1 off S), and a copy gymflow made of a night (`copy_store`, as a study's arm: listed
    as sealed there) fed that night twice. Each copy is left out now, named."""
    good = dated_run(tmp_path / "dev" / "good", "good", passing=12, day=2.5)
    root = tmp_path / "nightly"
    dated_run(root / "night-01", "night-01", passing=12, day=1)  # the baseline, 60%
    dated_run(root / "night-02", "night-02", passing=7, day=2)  # 35%
    third = dated_run(root / "night-03", "night-03", passing=7, day=3)
    tonight = dated_run(root / "night-04", "night-04", passing=7, day=4)
    alone = gate(tonight, margin=0.02)
    (honest,) = alone.checks
    assert (honest.runs_in_sequence, round(honest.cusum_before, 2)) == (3, 3.03)
    copies = [root / f"good-copy-{i}" for i in range(3)]
    for copy in copies:
        shutil.copytree(good, copy)
    by_hand = gate(tonight, margin=0.02)
    assert by_hand.checks == alone.checks  # on main: 6 runs in the sequence, S before 1.52
    copy_store(third, root / "night-03-by-gymflow")
    verdict = gate(tonight, margin=0.02)
    assert verdict.checks == alone.checks  # on main: 7 runs, S before 3.03 (night-03 twice)
    assert alone.left_out == ()
    assert by_hand.left_out == tuple(f"{copy} ({NOT_SEALED_HERE})" for copy in copies)
    assert verdict.left_out == (
        *by_hand.left_out,
        f"{root / 'night-03-by-gymflow'} (the same run as {third}: a run counts once)",
    )


def test_earlier_runs_none_of_which_count_are_no_pass(tmp_path: Path) -> None:
    """Every earlier run under the root left out (copied in, or moved there by hand) leaves
    nothing to compare with: that is not "nothing to compare with" on a first night, which
    passes, but a gate that fails until a baseline is named."""
    weak = dated_run(tmp_path / "dev" / "weak-experiment", "weak", passing=1, day=0)
    root = tmp_path / "nightly"
    first = dated_run(root / "night-01", "night-01", passing=12, day=1)
    alone = gym("runs", "gate", str(first), cwd=tmp_path)
    assert alone.returncode == 0 and "nothing to compare with" in alone.stdout
    shutil.copytree(weak, root / "night-00")
    done = gym("runs", "gate", str(first), cwd=tmp_path)
    said = " ".join(done.stdout.split())
    assert done.returncode == 2, said  # on main: the copy was the baseline, "passed +55.0"
    assert said.startswith(
        "regression gate FAILED: no earlier run counts in the history to compare with (name one "
        f"with --baseline); left out of the history: {root / 'night-00'} ({NOT_SEALED_HERE})"
    ), said
