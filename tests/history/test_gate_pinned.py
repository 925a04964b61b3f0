"""`gym runs pin` and the gate as a user types them, from the folder holding `runs/`: a pin
that holds is the baseline (and says so), an unpinned gate says which run it chose and that it
is not pinned, and a pin cannot be made of a run this machine did not seal where it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import gym_in_process as gym  # reads and pins of stored runs: no process needed
from tests.faults.stores import query
from tests.history.runs import dated_run


def _root(cwd: Path) -> tuple[Path, Path, Path]:
    root = cwd / "runs" / "nightly"
    first = dated_run(root / "night-01", "night-01", passing=16, day=1)  # 80%
    second = dated_run(root / "night-02", "night-02", passing=15, day=2)
    tonight = dated_run(root / "night-03", "night-03", passing=16, day=3)
    return first, second, tonight


def test_unpinned_the_gate_states_the_run_it_chose(tmp_path: Path) -> None:
    first, _, tonight = _root(tmp_path)
    said = gym("runs", "gate", "runs/nightly/night-03", cwd=tmp_path)
    assert said.returncode == 0, said.stdout + said.stderr
    summary, baseline, _ = said.stdout.splitlines()
    assert summary.startswith("regression gate passed: vs baseline: +0.0 points"), summary
    assert baseline == (
        f"baseline: {first}, not pinned: the earliest run of its benchmark version under "
        f"{first.parent} that this machine sealed there (pin it: gym runs pin {first} --root "
        f"{first.parent})"
    )
    verdict = json.loads(gym("runs", "gate", str(tonight), "--json", cwd=tmp_path).stdout)
    assert verdict["baseline"]["pinned"] is False and verdict["baseline"]["run_dir"] == str(first)
    shown = gym("runs", "pin", "--root", "runs/nightly", cwd=tmp_path)
    assert shown.returncode == 0 and "no baseline pinned under this root" in shown.stdout


def test_a_pinned_baseline_is_every_later_gates(tmp_path: Path) -> None:
    first, second, tonight = _root(tmp_path)
    done = gym("runs", "pin", "runs/nightly/night-02", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"pinned {second} as the baseline of every gate under")
    said = gym("runs", "gate", "runs/nightly/night-03", cwd=tmp_path)
    assert said.returncode == 0, said.stdout
    summary, baseline, _ = said.stdout.splitlines()
    assert summary.startswith("regression gate passed: vs baseline: +5.0 points"), summary
    assert baseline.startswith(f"baseline: {second}, pinned (store id "), baseline
    gate_json = json.loads((tonight / "gate.json").read_text())
    assert gate_json["baseline"]["pinned"] and gate_json["baseline"]["run_dir"] == str(second)
    assert gym("report", "runs/nightly/night-03", cwd=tmp_path).returncode == 0
    page = (tonight / "report.html").read_text()
    assert 'data-field="regression.baseline" data-value="pinned"' in page
    # the root named through a link: the pin is found by the path it resolves to
    (tmp_path / "alias").symlink_to(tonight.parent)
    linked = gym("runs", "gate", "alias/night-03", cwd=tmp_path)
    assert linked.stdout.splitlines()[1] == baseline, linked.stdout
    # the earliest run deleted: the pin still holds (it is not the earliest run's)
    shutil.rmtree(first)
    assert gym("runs", "gate", "runs/nightly/night-03", cwd=tmp_path).returncode == 0
    # the owner's routine write to the baseline raises its generation: still the store pinned
    store = second / "gymflow.duckdb"
    pinned = json.loads(gym("runs", "pin", "--root", "runs/nightly", "--json", cwd=tmp_path).stdout)
    (version,) = query(store, "SELECT verifier_version FROM runs")[0]
    assert gym("eval", "use-version", str(second), version, cwd=tmp_path).returncode == 0
    (generation,) = query(store, "SELECT value FROM meta WHERE key = 'generation'")[0]
    assert int(generation.split(":")[0]) > pinned["generation"]
    assert gym("runs", "gate", "runs/nightly/night-03", cwd=tmp_path).returncode == 0
    # another run named with --baseline is refused while the root is pinned
    named = gym("runs", "gate", "runs/nightly/night-03", "--baseline", str(first.parent / "x"),
                cwd=tmp_path)  # fmt: skip
    assert named.returncode == 2 and "is not the baseline pinned under" in named.stdout


def test_a_copy_made_by_hand_is_not_pinned(tmp_path: Path) -> None:
    first, _, _ = _root(tmp_path)
    shutil.copytree(first, tmp_path / "runs" / "nightly" / "night-00")
    done = gym("runs", "pin", "runs/nightly/night-00", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not pinned" in done.stderr and "a copy made by hand" in done.stderr
