"""The regression gate: a run compared, paired by task, with a pinned baseline, and a CUSUM over
the runs since that baseline so that false alarms are controlled across nights, not per night.

Why not a 95% test against the night before: at a nightly's size (50 tasks x 4 repeats) it
raised a false alarm on 2.5% of nights, so on most 30-night months at least once; it caught a
5-point drop on one night in five; and a drop it missed became the next night's reference, so a
slow drift was never seen. Here the reference stays put (the baseline: the root's pinned one,
`pins.py`; given; or the earliest run of the benchmark version in the history: the runs under
the root that count there, `counted.py`), each night's paired t statistic against it,
z = difference / SE, feeds a one-sided CUSUM, S = max(0, S_before - z - ALLOWANCE), and the gate
alarms when S exceeds THRESHOLD, or at once when a single night's t is below -LIMIT (S restarts
at 0 after an alarm): the CUSUM adds small drops up night after night until they are seen, the
limit catches a large drop on its first night (a combined Shewhart-CUSUM scheme, Lucas 1982).
bench/gate_calibration.py measures what this gives at the nightly's size: false alarms per
30-night month and how soon 2/5/10-point drops and drifts are caught. A drop must also exceed
the margin to fail the gate."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from gymflow.analysis.compare import CompareError, compare
from gymflow.analysis.health import health
from gymflow.analysis.paired import PAIRED_TEST
from gymflow.history.catalog import CatalogEntry, read_entry, refresh
from gymflow.history.counted import counted
from gymflow.history.pins import (
    BaselineChoice,
    Pin,
    PinError,
    Pinned,
    held,
    pinned_baseline,
    record_pin,
)
from gymflow.store.db import StoreError, StoreFailure, connect
from gymflow.store.sealed_files import read_sealed, write_sealed

Against = Literal["baseline"]
#: Beside the run's store: the report states the gate's verdict, whoever ran the gate.
GATE_FILE = "gate.json"
#: The CUSUM's allowance k, in standard errors: a night whose drop is within k SE of the
#: baseline adds nothing. About half the shift in SE it is quickest to detect (2 SE).
ALLOWANCE = 1.0
#: The CUSUM's decision threshold h and the single-night limit (in standard errors below the
#: baseline): together about 5% of stable 30-night months raise an alarm at the nightly's size
#: (50 tasks x 4 repeats) against a baseline of that size, whose own noise every night shares
#: (bench/gate_calibration.py).
THRESHOLD = 7.0
LIMIT = 3.5
#: The standard normal's 80% quantile: the detectable drop is stated at 80% power.
Z80 = 0.8416212335729143
#: How the gate decides: named in every verdict, so a reader knows which test said "regressed".
TEST = (
    f"{PAIRED_TEST}, against a pinned baseline; one-sided CUSUM of its t statistics over the runs "
    f"since the baseline, S = max(0, S_before - t - {ALLOWANCE:g}), alarm when S > "
    f"{THRESHOLD:g} or a single run's t < -{LIMIT:g} (about 5% of stable 30-night months at "
    "50 tasks x 4 repeats: bench/gate_calibration.py)"
)


@dataclass(frozen=True, slots=True)
class GateCheck:
    against: Against
    run_dir: str
    #: False when the comparison could not be made (`why` says why): that fails the gate
    compared: bool
    run_id: str | None
    #: this run's pass@1 minus the baseline's, on the tasks both hold
    difference: float | None
    ci95: tuple[float, float] | None
    tasks: int
    regressed: bool
    why: str
    #: the paired t statistic, difference / SE
    statistic: float | None = None
    #: the CUSUM before this run and after it (it alarms above THRESHOLD)
    cusum_before: float = 0.0
    cusum: float | None = None
    #: runs since the baseline that fed the CUSUM, this one included
    runs_in_sequence: int = 0
    #: the drop from the baseline this run's alarm needs to be seen with 80% power at its SE
    detectable_drop: float | None = None


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
    #: The same of the runs it is compared with (the baseline, the runs since), each "PATH:
    #: why", with verdicts this machine's key cannot check: an edited baseline passed a
    #: 40-point drop.
    untrusted: tuple[str, ...] = ()
    #: Runs under the root that would have been the baseline or fed the CUSUM but do not count
    #: in its history (`counted.py`), each "PATH (why)": a copy of an older weak run dropped
    #: into the root became the pinned baseline.
    left_out: tuple[str, ...] = ()
    #: Which run it compared with and how it was chosen: the root's pin (`pins.py`), whose
    #: store missing or replaced fails the gate, or, unpinned, said so.
    baseline: BaselineChoice | None = None

    @property
    def passed(self) -> bool:
        """A healthy run, no drop, and every comparison made: a run with nothing scored (every
        rollout failed), a baseline that cannot be read, a pinned one that is not the store
        pinned, or earlier runs none of which count in the history (moved, copied in: a
        baseline must then be named) is not a pass."""
        return (
            not (self.baseline is not None and self.baseline.refused)
            and not self.unhealthy
            and not self.untrusted
            and not any(check.regressed or not check.compared for check in self.checks)
            and bool(self.checks or not self.left_out)
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    def summary(self) -> str:
        health = "; ".join(
            [
                *(
                    [f"the run is unhealthy ({', '.join(self.unhealthy)})"]
                    if self.unhealthy
                    else []
                ),
                *(
                    [f"a run it is compared with cannot be trusted ({', '.join(self.untrusted)})"]
                    if self.untrusted
                    else []
                ),
            ]
        )
        if health:
            health += ": its scores cannot be trusted"
        left = f"; left out of the history: {', '.join(self.left_out)}" if self.left_out else ""
        if self.baseline is not None and self.baseline.refused:
            also = f"; {health}" if health else ""
            return f"regression gate FAILED: {self.baseline.refused}{also}"
        if not self.checks:
            if health:
                return f"regression gate FAILED: {health}{left}"
            if self.left_out:
                return (
                    "regression gate FAILED: no earlier run counts in the history to compare "
                    f"with (name one with --baseline){left}"
                )
            return "regression gate: nothing to compare with (no earlier run, no baseline)"
        word = "passed" if self.passed else "FAILED"
        return (
            f"regression gate {word}: "
            + "; ".join(
                [*([health] if health else []), *(f"vs {c.against}: {c.why}" for c in self.checks)]
            )
            + left
        )


def step(before: float, statistic: float) -> tuple[float, bool]:
    """The one-sided (downward) CUSUM after a run whose t statistic against the baseline is
    `statistic` (negative: below the baseline), and whether the run alarms."""
    s = max(0.0, before - statistic - ALLOWANCE)
    return s, s > THRESHOLD or statistic < -LIMIT


def sequence(statistics: list[float]) -> list[tuple[float, bool]]:
    """(CUSUM, alarm) after each run of a sequence of t statistics, the CUSUM restarting from 0
    after an alarm (the drop has been reported; one that persists alarms again)."""
    s, out = 0.0, []
    for statistic in statistics:
        s, alarmed = step(s, statistic)
        out.append((s, alarmed))
        s = 0.0 if alarmed else s
    return out


def _start(statistics: list[float]) -> float:
    """The CUSUM a run starts from after `statistics` (0 after an alarm)."""
    if not statistics:
        return 0.0
    s, alarmed = sequence(statistics)[-1]
    return 0.0 if alarmed else s


def _earlier(entries: list[CatalogEntry], run_dir: Path) -> list[CatalogEntry]:
    key = str(run_dir.resolve())
    this = next((e for e in entries if e.run_dir == key), None)
    if this is None or this.created_at is None:
        return []
    return [
        e
        for e in entries
        if e.run_dir != key
        and e.benchmark_version == this.benchmark_version
        and e.created_at is not None
        and e.created_at < this.created_at
    ]


def _not_compared(baseline: Path, exc: Exception) -> GateCheck:
    return GateCheck(
        against="baseline",
        run_dir=str(baseline),
        compared=False,
        run_id=None,
        difference=None,
        ci95=None,
        tasks=0,
        regressed=False,
        why=f"not compared: {exc}",
    )


def check(
    run_dir: Path, baseline: Path, *, margin: float, between: Sequence[Path] = ()
) -> GateCheck:
    """Compare `run_dir` with `baseline`, paired on task_id, after the runs `between` (in time
    order, since the baseline) have fed the CUSUM; a comparison that cannot be made is stated
    (and fails the gate: see GateVerdict.passed). An earlier run that cannot be compared is left
    out of the sequence."""
    try:
        with connect(baseline, read_only=True) as con_base:
            earlier = []
            for night in between:
                try:
                    with connect(night, read_only=True) as con:
                        found = compare(con, con_base)
                except (CompareError, StoreError, StoreFailure):
                    continue
                if found.stderr:
                    earlier.append(found.difference / found.stderr)
            with connect(run_dir, read_only=True) as con_a:
                result = compare(con_a, con_base)
    except (CompareError, StoreError, StoreFailure) as exc:
        return _not_compared(baseline, exc)
    difference, se = result.difference, result.stderr
    ci = tuple(result.ci95) if result.ci95 else None
    before = _start(earlier)
    points = f"{100 * difference:+.1f} points over {result.tasks} tasks"
    if ci is not None:
        points += f" (95% CI {100 * ci[0]:+.1f} to {100 * ci[1]:+.1f})"
    if not se:
        why = f"{points}: one paired task, no standard error: the CUSUM cannot use it"
        return GateCheck("baseline", str(baseline), True, result.b.run_id, difference, ci,
                         result.tasks, False, why, cusum_before=before,
                         runs_in_sequence=len(earlier) + 1)  # fmt: skip
    statistic = difference / se
    s, alarm = step(before, statistic)
    regressed = alarm and difference < -margin
    # Tonight alarms when -t exceeds THRESHOLD + ALLOWANCE - before or LIMIT; with 80% power
    # for a true drop of (the smaller + z_0.8) standard errors (normal approximation).
    detectable = (min(THRESHOLD + ALLOWANCE - before, LIMIT) + Z80) * se
    state = (
        f"t {statistic:+.2f}, CUSUM {before:.1f} -> {s:.1f} (alarm above {THRESHOLD:g}, or "
        f"t below -{LIMIT:g}) over "
        f"{len(earlier) + 1} run{'s' if earlier else ''} since the baseline; at this run's size "
        f"a drop of {100 * detectable:.1f} points is caught tonight with 80% power"
    )
    if regressed:
        why = f"{points}, {state}: a drop beyond the {100 * margin:.1f}-point margin"
    elif alarm:
        why = f"{points}, {state}: alarm, but within the {100 * margin:.1f}-point margin"
    else:
        why = f"{points}, {state}: no alarm"
    return GateCheck(
        against="baseline",
        run_dir=str(baseline),
        compared=True,
        run_id=result.b.run_id,
        difference=difference,
        ci95=ci,
        tasks=result.tasks,
        regressed=regressed,
        why=why,
        statistic=statistic,
        cusum_before=before,
        cusum=s,
        runs_in_sequence=len(earlier) + 1,
        detectable_drop=detectable,
    )


def gate(
    run_dir: Path,
    *,
    root: Path | None = None,
    baseline: Path | None = None,
    margin: float = 0.02,
) -> GateVerdict:
    """Gate `run_dir` against the baseline pinned for `root` (itself by default the folder
    holding the run's folder: `pins.py`), else `baseline`, else the earliest run of its
    benchmark version under `root`, through the CUSUM over the runs of that version between
    the baseline and this one. Only runs that count in the root's history (`counted.py`) are
    the default baseline or feed the CUSUM; those left out are named in the verdict. A pinned
    baseline that is not the store pinned fails the gate: no other run is compared with."""
    # the root as named, not resolved: its pin is looked up by both (`pins.read_pin`), so a
    # root replaced by a link elsewhere still finds the pin recorded for it
    root = Path(os.path.abspath(root or Path(os.path.abspath(run_dir)).parent))
    run_dir = run_dir.resolve()
    unhealthy = _untrusted(run_dir, compared=False)
    choice = pinned_baseline(root, baseline)
    if choice is not None and choice.refused:
        return GateVerdict(str(run_dir), margin, TEST, (), unhealthy, baseline=choice)
    history = counted(_earlier(refresh(root).entries, run_dir))
    earlier = history.runs
    if choice is None and baseline is not None:
        choice = BaselineChoice.unpinned(root, baseline.resolve(), "given with --baseline")
    if choice is None:
        first = min(earlier, key=lambda e: e.created_at or datetime.min, default=None)
        choice = BaselineChoice.unpinned(
            root,
            first.run_dir if first is not None else None,
            f"the earliest run of its benchmark version under {root} that this machine sealed there"
            if first is not None
            else f"no earlier run of its benchmark version under {root} that this machine sealed "
            "there",
        )
    if choice.run_dir is None:
        left_out = tuple(map(str, history.left_out))
        return GateVerdict(
            str(run_dir), margin, TEST, (), unhealthy, left_out=left_out, baseline=choice
        )
    baseline, given = Path(choice.run_dir), choice.pinned or baseline is not None
    key = str(baseline.resolve())
    since = next((e.created_at for e in earlier if e.run_dir == key), None)
    if since is None:  # a baseline outside the history: the runs after it still feed the CUSUM
        try:
            since = read_entry(baseline).created_at
        except (StoreError, StoreFailure, OSError):
            since = None  # not a run: `check` says so
    left_out = tuple(  # those older than a given baseline would not have counted anyway
        str(left)
        for left in history.left_out
        if not given or (since is not None and (left.entry.created_at or datetime.min) > since)
    )
    between = sorted(
        (e for e in earlier if since is not None and e.created_at > since),
        key=lambda e: e.created_at or datetime.min,
    )
    compared = [baseline, *(Path(e.run_dir) for e in between)]
    untrusted = tuple(  # an edited baseline would pass any candidate
        f"{other}: {why}" for other in compared for why in _untrusted(other, compared=True)
    )
    found = check(run_dir, baseline, margin=margin, between=compared[1:])
    # the pinned store, still at its path once read: one swapped in while the gate read it
    # would have been what it compared with
    choice = held(choice)
    return GateVerdict(str(run_dir), margin, TEST, (found,), unhealthy, untrusted, left_out, choice)


def pin(baseline: Path, *, root: Path) -> tuple[Pin, Pinned]:
    """Pin the store in `baseline` as the baseline of every later gate under `root` (`pins.py`),
    once every seal of it checks under this machine's key; returns the pin and what the root's
    record said before. PinError when it cannot be trusted or pinned."""
    untrusted = _untrusted(baseline, compared=True)
    if untrusted:
        raise PinError(
            f"{baseline}: not pinned: its numbers cannot be trusted ({', '.join(untrusted)})"
        )
    return record_pin(Path(os.path.abspath(root)), baseline)


#: health warnings that mean a run's verdicts cannot be checked by this machine's key: a run
#: the candidate is compared with must be checkable (a forged folder dated 2001 dropped into the
#: root became the pinned baseline and passed a 60-point drop)
UNCHECKABLE = ("verdict_unsealed", "seal_key_unknown")


def _untrusted(run_dir: Path, *, compared: bool) -> tuple[str, ...]:
    """Why the gate cannot trust `run_dir`'s numbers: its health's gate failures, every seal
    recomputed (never a recorded check taken), and, for a run it is `compared` with, verdicts
    this machine's key cannot check. Empty: trusted."""
    try:
        with connect(run_dir, read_only=True) as con:
            found = health(con, max_listed=0, verify_seals=True)
    except (StoreError, StoreFailure) as exc:  # no store, or nothing judged: nothing to trust
        return (f"not checked: {exc}",)
    uncheckable = [w for w in found.warnings if w in UNCHECKABLE] if compared else []
    return (*found.gate_failures, *uncheckable)


def save_verdict(verdict: GateVerdict) -> Path:
    run_dir = Path(verdict.run_dir)
    return write_sealed(run_dir / GATE_FILE, verdict.as_dict(), run_dir=run_dir)


def load_verdict(run_dir: Path) -> dict[str, Any] | None:
    """The last gate verdict stored beside a run, or None (never gated, unreadable, or not
    sealed here for this run: `store/sealed_files.py`)."""
    return read_sealed(run_dir / GATE_FILE, run_dir=run_dir)
