"""The statistics benchmarks run, in their --tiny mode, and print every table they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--tiny"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("script", "tables"),
    [
        (
            "ci_coverage.py",
            [
                "Near the ceiling: pass@1 and the pass@k band",
                "Paired CI of A - B near the ceiling",
                "Study under a global null, 8 variants",
                "Regression gate at 50 tasks x 4 repeats",
            ],
        ),
        (
            "gate_calibration.py",
            ["Stable months (false alarms)", "Drops from night 1 on", "Drift of 1 point a night"],
        ),
    ],
)
def test_bench_script_tiny(script: str, tables: list[str]) -> None:
    out = _run(script)
    for table in tables:
        assert table in out
    # every table row is filled with shares, none left undefined
    rows = [line for line in out.splitlines() if line.startswith("| ") and "%" in line]
    assert rows and not any("nan" in line for line in rows)
