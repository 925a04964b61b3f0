"""The regression gate: a run compared, paired by task, with the run before it and a pinned
baseline. A drop fails the gate only when it is both real (the paired difference's 95% CI lies
below zero) and large (beyond the margin): a significant drop of half a point is noise for a
nightly, and a large drop the test cannot tell from chance is not yet evidence."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from gymflow.analysis.compare import CompareError, compare
from gymflow.analysis.health import health
from gymflow.history.catalog import CatalogEntry, refresh
from gymflow.store.db import StoreError, connect
from gymflow.written import write_text

Against = Literal["previous", "baseline"]
#: Beside the run's store: the report states the gate's verdict, whoever ran the gate.
GATE_FILE = "gate.json"
#: How the gate decides: named in every verdict, so a reader knows which test said "significant".
TEST = "paired difference of per-task pass rates (this run - the other), 95% CI below 0"


@dataclass(frozen=True, slots=True)
class GateCheck:
    against: Against
    run_dir: str
    #: False when the comparison could not be made (`why` says why): that fails the gate
    compared: bool
    run_id: str | None
    #: this run's pass@1 minus the other's, on the tasks both hold
    difference: float | None
    ci95: tuple[float, float] | None
    tasks: int
    regressed: bool
    why: str


@dataclass(frozen=True, slots=True)
class GateVerdict:
    run_dir: str
    margin: float
    test: str
    checks: tuple[GateCheck, ...]
    #: The run's health checks beyond their thresholds: an unhealthy run is no pass, however
    #: its few scored tasks compare (a night whose model server died scored one task in six,
    #: and "+0.0 points over 1 tasks" passed).
    unhealthy: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """A healthy run, no drop, and every comparison made: a run with nothing scored (every
        rollout failed) or a pinned baseline that cannot be read is not a pass."""
        return not self.unhealthy and not any(
            check.regressed or not check.compared for check in self.checks
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    def summary(self) -> str:
        health = (
            f"the run is unhealthy ({', '.join(self.unhealthy)}): its scores cannot be trusted"
            if self.unhealthy
            else ""
        )
        if not self.checks:
            if health:
                return f"regression gate FAILED: {health}"
            return "regression gate: nothing to compare with (no earlier run, no baseline)"
        word = "passed" if self.passed else "FAILED"
        return f"regression gate {word}: " + "; ".join(
            [*([health] if health else []), *(f"vs {c.against}: {c.why}" for c in self.checks)]
        )


def previous_run(entries: list[CatalogEntry], run_dir: Path) -> CatalogEntry | None:
    """The latest run before `run_dir`'s of the same benchmark version, from a catalog."""
    key = str(run_dir.resolve())
    this = next((e for e in entries if e.run_dir == key), None)
    if this is None or this.created_at is None:
        return None
    earlier = [
        e
        for e in entries
        if e.run_dir != key
        and e.benchmark_version == this.benchmark_version
        and e.created_at is not None
        and e.created_at < this.created_at
    ]
    return max(earlier, key=lambda e: e.created_at or datetime.min, default=None)


def check(run_dir: Path, other: Path, against: Against, *, margin: float) -> GateCheck:
    """Compare `run_dir` with `other`, paired on task_id; a comparison that cannot be made is
    stated (and fails the gate: see GateVerdict.passed)."""
    try:
        with connect(run_dir, read_only=True) as con_a, connect(other, read_only=True) as con_b:
            result = compare(con_a, con_b)
    except (CompareError, StoreError) as exc:
        return GateCheck(
            against=against,
            run_dir=str(other),
            compared=False,
            run_id=None,
            difference=None,
            ci95=None,
            tasks=0,
            regressed=False,
            why=f"not compared: {exc}",
        )
    difference, ci = result.difference, result.ci95
    ci = tuple(ci) if ci else None
    significant = ci is not None and ci[1] < 0
    regressed = significant and difference < -margin
    points = f"{100 * difference:+.1f} points over {result.tasks} tasks"
    if ci is not None:
        points += f" (95% CI {100 * ci[0]:+.1f} to {100 * ci[1]:+.1f})"
    if regressed:
        why = f"{points}: a significant drop beyond the {100 * margin:.1f}-point margin"
    elif significant:
        why = f"{points}: significant, within the {100 * margin:.1f}-point margin"
    else:
        why = f"{points}: not a significant drop"
    return GateCheck(
        against=against,
        run_dir=str(other),
        compared=True,
        run_id=result.b.run_id,
        difference=difference,
        ci95=ci,
        tasks=result.tasks,
        regressed=regressed,
        why=why,
    )


def gate(
    run_dir: Path,
    *,
    root: Path | None = None,
    baseline: Path | None = None,
    margin: float = 0.02,
) -> GateVerdict:
    """Gate `run_dir` against the run before it under `root` (default: the folder holding the
    run's folder) and against `baseline`, when given."""
    run_dir = run_dir.resolve()
    checks = []
    try:
        with connect(run_dir, read_only=True) as con:
            unhealthy = tuple(health(con, max_listed=0).gate_failures)
    except StoreError as exc:  # no store, or nothing judged: nothing to trust either
        unhealthy = (f"not checked: {exc}",)
    catalog = refresh(root or run_dir.parent)
    before = previous_run(catalog.entries, run_dir)
    if before is not None:
        checks.append(check(run_dir, Path(before.run_dir), "previous", margin=margin))
    if baseline is not None:
        checks.append(check(run_dir, baseline, "baseline", margin=margin))
    return GateVerdict(str(run_dir), margin, TEST, tuple(checks), unhealthy)


def save_verdict(verdict: GateVerdict) -> Path:
    path = Path(verdict.run_dir) / GATE_FILE
    write_text(path, json.dumps(verdict.as_dict(), indent=2, allow_nan=False))
    return path


def load_verdict(run_dir: Path) -> dict[str, Any] | None:
    """The last gate verdict stored beside a run, or None (never gated, or unreadable)."""
    try:
        return json.loads((run_dir / GATE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
