"""Verifier parameters that are not finite: `--set rel_tol=inf` made numeric_match pass every
answer (math.isclose with an infinite tolerance), and its version's JSON held `Infinity`. Nor may
a verifier's reward be anything but a finite number."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pytest

from gymflow.environments.registry import load_environment
from gymflow.verifiers.base import Verdict, VerifyInput, get_verifier
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


@pytest.mark.parametrize(
    "reward", [float("nan"), float("inf"), None, "1"], ids=["nan", "inf", "none", "text"]
)
def test_a_verifier_that_returns_no_finite_reward_is_a_verifier_error(reward) -> None:
    """An environment's own verifier returning NaN was stored as a scored, failing rollout (and
    every mean over the run became NaN); None stopped the collector's rollout as a harness error
    and a reverify with a traceback."""
    env = load_environment("arithmetic")
    server = env.resources_server()
    server.verifier = dataclasses.replace(server.verifier, fn=lambda inp, params: Verdict(reward))
    verification = server.verify_sync(VerifyInput(env.tasks()[0], "Answer: 4"))
    assert (verification.status, verification.failure_kind) == ("error", "bad_reward")
    assert verification.reward is None and verification.passed is None
