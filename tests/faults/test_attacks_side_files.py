"""Files beside a run's store that its report shows as gymflow's own findings: RUN/gate.json
(the regression gate's verdict) and RUN/confirm/outcome.json (a confirmation's outcome). Attack
pass 5 (s01): written by whoever can write the run folder, the owner's `gym report RUN` showed
"Regression gate passed, +18.0 points" and an experiment no one ran, on a healthy run with no
warning; a gate.json of the wrong shape ended the report in a traceback. Now each is sealed by
this machine's key for its place (`store/sealed_files.py`), and any other reads as absent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gymflow.analysis.results import Confirmation, Experiment
from gymflow.history.gate import GATE_FILE, load_verdict
from gymflow.study.confirm import OUTCOME, load_outcome, save_outcome
from tests.conftest import gym_in_process as gym
from tests.faults.stores import collect_run

PLANTED_GATE = {
    "run_dir": "RUN", "margin": 0.02, "test": "paired t over 20 tasks",
    "checks": [{"against": "baseline", "run_id": "baseline-gpt-5", "run_dir": "runs/baseline",
                "why": "+18.0 points (95% CI +9.1 to +26.9), no drop", "regressed": False,
                "compared": True}],
    "unhealthy": [], "untrusted": [], "passed": True,
}  # fmt: skip


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("side") / "run")


@pytest.mark.parametrize(
    "planted",
    [
        json.dumps(PLANTED_GATE),
        "[]",
        '{"passed": false}',
        '{"passed": true, "margin": "x", "test": "t", "checks": []}',
        json.dumps({**PLANTED_GATE, "gymflow_seal": "0" * 64}),
    ],
)
def test_a_gate_verdict_no_gate_wrote_is_not_shown(honest: Path, tmp_path: Path, planted: str):
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    (run / GATE_FILE).write_text(planted)
    assert load_verdict(run) is None
    done = gym("report", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = (run / "report.html").read_text()
    assert 'id="regression-gate"' not in report and "regression.gate" not in report


def test_a_gate_verdict_sealed_for_another_run_is_not_shown(tmp_path: Path) -> None:
    """A sealed verdict copied from another run's folder is that run's, not this one's."""
    ours, theirs = collect_run(tmp_path / "ours"), collect_run(tmp_path / "theirs")
    done = gym("runs", "gate", str(theirs), cwd=tmp_path)
    assert (theirs / GATE_FILE).is_file(), done.stdout + done.stderr
    assert load_verdict(theirs) is not None
    (ours / GATE_FILE).write_bytes((theirs / GATE_FILE).read_bytes())
    assert load_verdict(ours) is None
    stored = json.loads((theirs / GATE_FILE).read_text())
    assert "passed" in stored and "checks" in stored  # readable as before, one field more


def test_a_confirmation_no_confirm_wrote_is_not_shown(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run")
    experiment = Experiment(
        action="model_training", kind="rerun", factor="repeats", change={"repeats": 8},
        tasks=["t1"], measure="pass_rate",
        how="rerun at 8 repeats", predicted="the tasks pass",
    )  # fmt: skip
    outcome = Confirmation(
        experiment=experiment, ran=True, run_dir=str(run / "confirm" / "x"), tasks=1,
        before=0.2, after=0.9, gained=1, lost=0, effect=True, why="attacker's text",
    )  # fmt: skip

    class Decision:
        pass

    decision = Decision()
    decision.experiment = experiment  # type: ignore[attr-defined]
    (run / OUTCOME).parent.mkdir()
    (run / OUTCOME).write_text(json.dumps(outcome.as_json()))
    assert load_outcome(run, decision) is None
    save_outcome(run, outcome)  # as `gym eval decide --confirm` keeps it
    assert load_outcome(run, decision) == outcome
