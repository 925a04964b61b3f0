"""Verifier parameters that are not finite: `--set rel_tol=inf` made numeric_match pass every
answer (math.isclose with an infinite tolerance), and its version's JSON held `Infinity`."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from gymflow.verifiers.base import get_verifier
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_parameter_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match=r"numeric_match.*(not a finite number|greater than)"):
        get_verifier("numeric_match").params({"rel_tol": value})


def test_reverify_with_an_infinite_tolerance_stores_nothing(tmp_path: Path) -> None:
    builder = StoreBuilder(RunMeta(run_id="r", model="m", repeats=2))
    for i in range(3):
        builder.task(f"t{i}", answer=i)
        builder.fill(f"t{i}", "10")
    run = builder.write(tmp_path / "run")
    out = gym("eval", "reverify", str(run), "--set", "rel_tol=inf", cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "rel_tol: inf is not a finite number" in out.stderr
    assert "Traceback" not in out.stderr
    with duckdb.connect(str(run / "gymflow.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM verifier_versions").fetchone()[0] == 1
