"""What a study found: each variant's paired difference from the baseline, with its interval and
p-value adjusted for the number of variants (Bonferroni), flips, coverage and health."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gymflow.analysis.compare import CompareError, compare
from gymflow.analysis.health import health
from gymflow.analysis.paired import PAIRED_TEST
from gymflow.analysis.profile import headline
from gymflow.analysis.results import Comparison
from gymflow.analysis.simulated import simulated
from gymflow.analysis.stats import ALPHA, t_interval
from gymflow.store.db import connect
from gymflow.store.runs import run_info
from gymflow.study.spec import Arm, Study

#: The test behind every difference, interval, p-value and colour of a study.
TEST = (
    f"{PAIRED_TEST}; intervals and p-values Bonferroni-adjusted over the variants, so that the "
    "intervals hold simultaneously and a variant is coloured only when its adjusted p <= 0.05 "
    "(its interval then excludes 0)"
)


def bonferroni(p_values: list[float | None]) -> list[float | None]:
    """min(1, m * p) over the m p-values that are not None (None: not compared, not a test).
    Holm's step-down rejects a little more often, but no interval matches its verdicts short of
    Strassburger & Bretz's (one-sided for every rejected variant); Bonferroni's verdicts and its
    simultaneous intervals agree exactly, so the colour, the p-value and the interval never
    disagree."""
    m = sum(p is not None for p in p_values)
    return [None if p is None else min(1.0, m * p) for p in p_values]


@dataclass(frozen=True, slots=True)
class ArmRun:
    """Where an arm's scores live: its store and the verifier version that judged it."""

    arm: Arm
    run_dir: Path
    verifier_version: str


@dataclass(frozen=True, slots=True)
class ArmSummary:
    name: str
    run_dir: str
    run_id: str
    verifier_version: str
    factors: tuple[str, ...]
    isolates: str | None
    confounded: bool
    reverify_only: bool
    pass1: float | None
    ci95: tuple[float, float] | None
    coverage: dict[str, int]
    health: str
    #: a simulated model answered this arm (`gymflow.analysis.simulated`)
    simulated: bool


@dataclass(frozen=True, slots=True)
class VariantEffect:
    """A variant against the baseline, paired on task_id (difference = variant - baseline)."""

    summary: ArmSummary
    tasks: int
    unpaired_tasks: dict[str, int]
    difference: float | None
    #: the simultaneous 95% interval: each at 1 - 0.05 / variants compared (Bonferroni)
    ci95: tuple[float, float] | None
    p_value: float | None
    p_adjusted: float | None
    #: adjusted p <= 0.05, which is the interval excluding 0: what the colour shows
    significant: bool
    gained: tuple[str, ...]
    lost: tuple[str, ...]
    attribution: str
    error: str | None = None
    #: when only the harness differs: what the harness evidence says (analysis.harness_evidence)
    harness: str | None = None


@dataclass(frozen=True, slots=True)
class StudyResult:
    name: str
    test: str
    baseline: ArmSummary
    variants: tuple[VariantEffect, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(run: ArmRun) -> ArmSummary:
    with connect(run.run_dir, read_only=True) as con:
        head = headline(con, run.verifier_version)
        verdict = health(con, verifier_version=run.verifier_version, max_listed=0).verdict
        run_id = run_info(con).run_id
        answered_by_simulation = simulated(con)
    ci = head.ci95
    return ArmSummary(
        name=run.arm.name,
        run_dir=str(run.run_dir),
        run_id=run_id,
        verifier_version=run.verifier_version,
        factors=run.arm.factors,
        isolates=run.arm.isolates,
        confounded=run.arm.confounded,
        reverify_only=run.arm.reverify_only,
        pass1=head.pass_at_1,
        ci95=tuple(ci) if ci else None,
        coverage=head.coverage.as_dict(),
        health=verdict,
        simulated=answered_by_simulation,
    )


def _attribution(arm: Arm) -> str:
    if arm.isolates:
        return f"only the {arm.isolates} differs: the difference can be attributed to it"
    return (
        f"confounded: {len(arm.factors)} factors differ ({', '.join(arm.factors)}); the "
        "difference cannot be attributed to any one of them"
    )


def _effect(variant: ArmRun, baseline: ArmRun) -> Comparison | str:
    """The variant compared with the baseline, paired on task_id, or why it cannot be."""
    try:
        with (
            connect(variant.run_dir, read_only=True) as con_v,
            connect(baseline.run_dir, read_only=True) as con_b,
        ):
            return compare(
                con_v,
                con_b,
                verifier_version_a=variant.verifier_version,
                verifier_version_b=baseline.verifier_version,
            )
    except CompareError as exc:
        return str(exc)


def _variant(
    run: ArmRun, found: Comparison | str, p_adjusted: float | None, compared: int
) -> VariantEffect:
    summary, attribution = summarise(run), _attribution(run.arm)
    if isinstance(found, str):
        return VariantEffect(
            summary=summary,
            tasks=0,
            unpaired_tasks={},
            difference=None,
            ci95=None,
            p_value=None,
            p_adjusted=p_adjusted,
            significant=False,
            gained=(),
            lost=(),
            attribution=attribution,
            error=found,
        )
    ci = (
        t_interval(found.difference, found.stderr, found.tasks, alpha=ALPHA / compared).bounds
        if found.stderr is not None
        else None
    )
    return VariantEffect(
        summary=summary,
        tasks=found.tasks,
        unpaired_tasks=found.unpaired_tasks.as_json(),
        difference=found.difference,
        ci95=ci,
        p_value=found.p_value,
        p_adjusted=p_adjusted,
        significant=p_adjusted is not None and p_adjusted <= ALPHA,
        gained=tuple(found.flipped.a_only),
        lost=tuple(found.flipped.b_only),
        attribution=attribution,
        harness=found.harness.decision if found.harness is not None else None,
    )


def study_result(study: Study, baseline: ArmRun, variants: list[ArmRun]) -> StudyResult:
    found = [_effect(v, baseline) for v in variants]
    adjusted = bonferroni([None if isinstance(f, str) else f.p_value for f in found])
    compared = max(sum(p is not None for p in adjusted), 1)
    rows = tuple(
        _variant(run, effect, p_adjusted, compared)
        for run, effect, p_adjusted in zip(variants, found, adjusted, strict=True)
    )
    return StudyResult(study.name, TEST, summarise(baseline), rows)
