"""The decision benchmark (bench/decide.py) as a user runs it: every scenario, simulated or
recorded, gets the right next action, or its miss is explained; both halves are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.analysis.builder import RunMeta, StoreBuilder

ROOT = Path(__file__).resolve().parents[2]


def _recorded(folder: Path) -> None:
    """A recorded store kept as a fixture: an uncapable model's wrong answers, read as stored."""
    b = StoreBuilder(RunMeta(repeats=2))
    for i in range(5):
        b.task(f"t{i}", 10 + i)
        b.fill(f"t{i}", "00")
    b.write(folder / "run")
    scenario = {
        "name": "recorded-uncapable",
        "broken": "nothing; a model that cannot do the tasks",
        "expected": "model_training",
        "store": "run",
    }
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario))


# bench/decide.py over every scenario in a process of its own; the decisions' own tests
# (tests/analysis, tests/study) are in the fast tier
@pytest.mark.slow
def test_every_scenario_gets_the_right_action(tmp_path: Path) -> None:
    _recorded(tmp_path / "recorded" / "uncapable")
    done = subprocess.run(
        [sys.executable, "bench/decide.py", "--tiny", "--json", "--recorded",
         str(ROOT / "tests" / "fixtures" / "real_model"), str(tmp_path / "recorded")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    names = {o["name"] for o in outcomes}
    simulated = yaml.safe_load((ROOT / "bench" / "decide_scenarios.yaml").read_text())
    assert names >= {entry["name"] for entry in simulated} | {"recorded-uncapable"}, done.stderr
    # a miss must be explained (known_miss) to pass, and both halves are reported
    wrong = [o for o in outcomes if not o["right"] and not o["known_miss"]]
    assert not wrong, wrong
    assert {o["half"] for o in outcomes} == {"rules", "held-out"}
    assert done.returncode == 0, done.stderr
    table = subprocess.run(
        [sys.executable, "bench/decide.py", "--tiny", "--only", "output-limit-cuts-answers"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert "output-limit-cuts-answers" in table.stdout and "1 of 1 scenarios right" in table.stdout
