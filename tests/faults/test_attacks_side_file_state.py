"""A sealed file beside a run (gate.json, confirm/outcome.json) is bound to the state of the
run's store it was made from, and read only when it is a small regular file. Attack pass 6:
- s15: last night's sealed "passed" gate.json, put back beside tonight's run in the same
  folder, made `gym report` say "Regression gate passed" for a run whose gate had failed;
- s20: a 1 GB sparse gate.json took `gym report` 2.3 GB of memory before it was found unsealed,
  and a FIFO there would hang the read."""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import pytest

from gymflow.core import bounded_yaml
from gymflow.core.bounded_yaml import YamlFileError
from gymflow.history.gate import GATE_FILE
from gymflow.store.sealed_files import read_sealed, write_sealed
from tests.conftest import gym
from tests.faults.stores import collect_run, edit_store

VERDICT = {"passed": True, "checks": ["+0.0 points"]}


def test_a_file_sealed_for_another_state_of_the_store_reads_as_absent(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "nightly", limit=4)
    gate = write_sealed(run / GATE_FILE, VERDICT, run_dir=run)
    assert read_sealed(gate, run_dir=run) == VERDICT
    kept = gate.read_bytes()
    # the next night's run in the same folder: last night's file put back reads as absent
    shutil.rmtree(run)
    collect_run(run, limit=4, repeats=2)
    gate.write_bytes(kept)
    assert read_sealed(gate, run_dir=run) is None
    # and so does one of this run once its store changed (a version made current, a resume)
    write_sealed(gate, VERDICT, run_dir=run)
    assert read_sealed(gate, run_dir=run) == VERDICT
    edit_store(run, "UPDATE meta SET value = value WHERE key = 'seal'")
    assert read_sealed(gate, run_dir=run) == VERDICT  # the same records: the same state
    edit_store(run, "INSERT INTO meta VALUES ('current_verifier_version', 'other@00000000')")
    assert read_sealed(gate, run_dir=run) is None


def test_a_huge_or_special_file_is_not_read(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run", limit=4)
    gate = run / GATE_FILE
    with gate.open("wb") as out:  # 1 GB long, no disk
        out.truncate(1 << 30)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert read_sealed(gate, run_dir=run) is None
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100_000  # KiB
    gate.unlink()
    os.mkfifo(gate)
    assert read_sealed(gate, run_dir=run) is None  # never waits on a writer


def test_a_fifo_among_the_benchmarks_hangs_nothing(tmp_path: Path) -> None:
    """s20: a FIFO named `*.yaml` in a folder of benchmarks hung `gym list benchmarks` and
    every run naming a benchmark, its open waiting for a writer."""
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    os.mkfifo(folder / "bad.yaml")
    env = {"GYMFLOW_BENCHMARKS_PATH": str(folder)}
    listed = gym("list", "benchmarks", cwd=tmp_path, env=env, timeout=60)
    assert listed.returncode == 0 and "arithmetic-smoke" in listed.stdout, listed.stderr
    with pytest.raises(YamlFileError, match="a FIFO or socket"):
        bounded_yaml.read_text(folder / "bad.yaml")
