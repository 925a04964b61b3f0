"""The real model's recorded runs (tests/fixtures/real_model, made by `python -m
tests.real_model.record`), read in seconds without a server: the benchmarks' own checkers agree
with the verdicts stored, the runs are healthy and complete, and each decision scenario (one
factor broken on purpose) gets the action that is right for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gymflow.analysis.run import analyse
from gymflow.store.db import connect
from tests.real_model import references
from tests.real_model.plans import ALL, FIXTURES, Plan, scenario
from tests.real_model.record import STORE, manifest, unpack

RECORDED = sorted(folder.name for folder in FIXTURES.iterdir() if (folder / STORE).exists())
PLANS = ALL
SCENARIO_PLANS = [plan for plan in PLANS if scenario(plan)]


def test_every_plan_is_recorded_and_every_scenario_has_its_manifest() -> None:
    assert sorted(plan.name for plan in PLANS) == RECORDED
    for plan in PLANS:
        assert (FIXTURES / plan.name / "scenario.yaml").exists() == (manifest(plan) is not None)
        if manifest(plan):
            on_disk = yaml.safe_load((FIXTURES / plan.name / "scenario.yaml").read_text())
            assert on_disk == manifest(plan)


def _run_dir(name: str, tmp_path: Path) -> Path:
    return unpack(FIXTURES / name, tmp_path / name)


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_run_is_complete_and_healthy(name: str, tmp_path: Path) -> None:
    con = connect(_run_dir(name, tmp_path), read_only=True)
    try:
        result = analyse(con)
    finally:
        con.close()
    coverage = result.profile.coverage
    assert coverage.missing == 0 and coverage.failed == 0, coverage
    assert coverage.scored == coverage.expected > 0
    assert result.health.verdict == "healthy", result.health.broken


@pytest.mark.parametrize("name", sorted(set(RECORDED) & set(references.CHECKERS)))
def test_recorded_verdicts_agree_with_the_benchmarks_own_checker(name: str, tmp_path: Path) -> None:
    rows = references.scored_rollouts(_run_dir(name, tmp_path))
    comparisons = references.compare(name, rows)
    assert all(c.n > 0 for c in comparisons), [c.report() for c in comparisons]
    problems = [c.report() for c in comparisons if c.disagreements]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(
            plan, id=plan.name, marks=pytest.mark.xfail(strict=True, reason=plan.known_miss)
        )
        if plan.known_miss
        else pytest.param(plan, id=plan.name)
        for plan in SCENARIO_PLANS
    ],
)
def test_a_recorded_scenario_gets_the_right_next_action(plan: Plan, tmp_path: Path) -> None:
    """Each next action a hypothesis tested on the stored rollouts (issue 40), on models and
    templates of both kinds: Gemma 3 270M base copying the prompt back is the chat format, not
    the token limit that cut it."""
    broken, expected = scenario(plan)
    con = connect(_run_dir(plan.name, tmp_path), read_only=True)
    try:
        decision = analyse(con).decision
    finally:
        con.close()
    assert decision.action == expected, (broken, decision.why)
