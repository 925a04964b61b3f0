"""bench/startup.py runs as documented (`--tiny`: one round of the figures that need no Prefect
server, on a 10-rollout run) and prints each figure beside its bound."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


# a benchmark's run, like tests/bench/test_tiny.py's: the slow tier
@pytest.mark.slow
def test_startup_bench_prints_each_figure_against_its_bound() -> None:
    ran = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "startup.py"), "--tiny"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rows = {line[:58].strip(): line[58:] for line in ran.stdout.splitlines()[2:]}
    assert set(rows) == {
        "python -c pass (floor)",
        "gym --help",
        "profile() without the CLI",
        "gym eval profile --json",
        "run stages without Prefect",
    }, ran.stdout
    assert "< 0.5 s:" in rows["gym --help"]
    assert "< 1.0 s:" in rows["gym eval profile --json"]
    for row in rows.values():
        median, best, cpu, load = (float(x) for x in row.split()[:4])
        assert 0 < best <= median and cpu >= 0 and load >= 0, row
