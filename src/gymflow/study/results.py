"""What a study found: each variant's paired difference from the baseline, with p-values
adjusted for the number of variants (Holm), flips, coverage and health."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gymflow.analysis.compare import CompareError, compare
from gymflow.analysis.health import health
from gymflow.analysis.profile import headline
from gymflow.analysis.results import Comparison
from gymflow.analysis.simulated import simulated
from gymflow.store.db import connect
from gymflow.store.runs import run_info
from gymflow.study.spec import Arm, Study

#: The test whose p-values are adjusted: the one `gym eval profile --compare` reports.
TEST = "McNemar's test on per-task majority verdicts, Holm-adjusted over the variants"


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (controls the family-wise error rate); None stays None and
    does not count as a test."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(ranked)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


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
    ci95: tuple[float, float] | None
    p_value: float | None
    p_holm: float | None
    gained: tuple[str, ...]
    lost: tuple[str, ...]
    attribution: str
    error: str | None = None


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
        run_id = run_info(con)["run_id"]
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


def _variant(run: ArmRun, found: Comparison | str, p_holm: float | None) -> VariantEffect:
    summary, attribution = summarise(run), _attribution(run.arm)
    if isinstance(found, str):
        return VariantEffect(
            summary=summary,
            tasks=0,
            unpaired_tasks={},
            difference=None,
            ci95=None,
            p_value=None,
            p_holm=p_holm,
            gained=(),
            lost=(),
            attribution=attribution,
            error=found,
        )
    ci = found.ci95
    return VariantEffect(
        summary=summary,
        tasks=found.tasks,
        unpaired_tasks=found.unpaired_tasks.as_json(),
        difference=found.difference,
        ci95=tuple(ci) if ci else None,
        p_value=found.mcnemar.p_value,
        p_holm=p_holm,
        gained=tuple(found.flipped.a_only),
        lost=tuple(found.flipped.b_only),
        attribution=attribution,
    )


def study_result(study: Study, baseline: ArmRun, variants: list[ArmRun]) -> StudyResult:
    found = [_effect(v, baseline) for v in variants]
    adjusted = holm([None if isinstance(f, str) else f.mcnemar.p_value for f in found])
    rows = tuple(
        _variant(run, effect, p_holm)
        for run, effect, p_holm in zip(variants, found, adjusted, strict=True)
    )
    return StudyResult(study.name, TEST, summarise(baseline), rows)
