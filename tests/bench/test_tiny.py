"""Every script under bench/ runs in its tiny mode and prints its figures: a benchmark that a
change broke fails here, not months later when somebody wants its number. A script whose tiny
run a test of its own makes and checks more closely is left to that test (`TESTED_ELSEWHERE`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
#: Scripts whose `--tiny` run another test makes, asserting its exit code and the figures or
#: tables it prints: run here too, each would cost its CPU twice in the suite for nothing.
TESTED_ELSEWHERE = {
    "ci_coverage.py": "tests/analysis/test_bench_scripts.py",
    "gate_calibration.py": "tests/analysis/test_bench_scripts.py",
    "decide.py": "tests/analysis/test_decide_bench.py",
    "startup.py": "tests/test_bench_startup.py",
}
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in ("tiny.py", *TESTED_ELSEWHERE))


#: The scripts that run NeMo Gym's code, from its own Python 3.12 venv.
NEMO_GYM_SCRIPTS = ("nemo_gym_contract.py", "nemo_gym_replay.py", "nemo_gym_sweep.py")


def _peer_arguments(script: str) -> list[str]:
    """The scripts that measure NeMo Gym's code run it from its own Python 3.12 venv."""
    if script not in NEMO_GYM_SCRIPTS:
        return []
    venv = os.environ.get("GYMFLOW_NEMO_GYM_VENV")
    if not venv:
        if os.environ.get("CI"):
            pytest.fail("GYMFLOW_NEMO_GYM_VENV is not set; .ci/run makes NeMo Gym's venv")
        pytest.skip("GYMFLOW_NEMO_GYM_VENV (a venv with nemo-gym==0.4.0) is not set")
    return ["--venv", venv] if script == "nemo_gym_contract.py" else []


@pytest.mark.parametrize("script", SCRIPTS)
def test_tiny_run(script: str, tmp_path: Path, prefect_api: str) -> None:
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "GYMFLOW_LOCAL_PREFECT": "off"}
    ran = subprocess.run(
        [sys.executable, str(BENCH / script), "--tiny", *_peer_arguments(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, (
        f"{script} --tiny exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
    )
    assert any(ch.isdigit() for ch in ran.stdout), (
        f"{script} --tiny printed no figure:\n{ran.stdout}"
    )


@pytest.mark.parametrize("script", sorted(TESTED_ELSEWHERE))
def test_tested_elsewhere_runs_its_tiny_mode(script: str) -> None:
    """The test a script is left to still runs it with `--tiny`."""
    test = ROOT / TESTED_ELSEWHERE[script]
    text = test.read_text()
    assert script in text and '"--tiny"' in text, f"{test} no longer runs {script} --tiny"
