"""Harness evidence from a comparison: with the same model, the tasks one harness solves and the
other does not are harness work, and the rollouts that failed them are the evidence.

It applies when the two runs differ only in the harness (every differing factor is in the
`harness` group: the harness, its agent and agent version, its turn limit, its sandbox). A task
counts for a harness when some rollout passed under it; against it, when it has rollouts under the
other harness and none passed, failed rollouts (an agent that crashed, timed out or stopped at its
step limit) included: a harness that crashes where another succeeds is the harness's failure."""

from __future__ import annotations

from gymflow.analysis.factors import groups_of
from gymflow.analysis.outcomes import task_table
from gymflow.analysis.results import Factor, FailingRollout, HarnessEvidence, HarnessGap
from gymflow.store.queries.rollouts import failing_rollouts

#: Failing rollouts listed per task, at most.
ROLLOUTS_PER_TASK = 3
HARNESS_GROUP = "harness"


def _harness_of(factors: list[Factor], side: str) -> str:
    parts = [f"{f.factor}={getattr(f, side)}" for f in factors]
    return ", ".join(parts)


def harness_evidence(
    con_a, con_b, factors: list[Factor], version_a: str, version_b: str
) -> HarnessEvidence | None:
    """The evidence when only the harness differs between the runs; None otherwise."""
    if not factors or groups_of(factors) != (HARNESS_GROUP,):
        return None
    a, b = (_passes(con, v) for con, v in ((con_a, version_a), (con_b, version_b)))
    shared = sorted(a.keys() & b.keys())
    a_only = [t for t in shared if a[t][0] > 0 and b[t][0] == 0 and b[t][1] > 0]
    b_only = [t for t in shared if b[t][0] > 0 and a[t][0] == 0 and a[t][1] > 0]
    evidence = HarnessEvidence(
        harness_a=_harness_of(factors, "a"),
        harness_b=_harness_of(factors, "b"),
        a_only=[HarnessGap(task_id=t, passes=a[t][0], rollouts=b[t][1],
                           failing=_failing(con_b, version_b, t)) for t in a_only],
        b_only=[HarnessGap(task_id=t, passes=b[t][0], rollouts=a[t][1],
                           failing=_failing(con_a, version_a, t)) for t in b_only],
        decision="",
    )  # fmt: skip
    return evidence.model_copy(update={"decision": _decision(evidence, len(shared))})


def _passes(con, version: str) -> dict[str, tuple[int, int]]:
    """task_id -> (passing rollouts, stored rollouts), failed ones counted as not passing."""
    table = task_table(con, version, failures_as_zero=True)
    return {row["task_id"]: (row["c"], row["n"]) for row in table.iter_rows(named=True)}


def _failing(con, version: str, task_id: str) -> list[FailingRollout]:
    rows = failing_rollouts(con, version, task_id, ROLLOUTS_PER_TASK)
    return [
        FailingRollout(rollout_id=r[0], repeat_index=r[1], status=r[2], failure_kind=r[3],
                       reward=r[4])
        for r in rows
    ]  # fmt: skip


def _decision(evidence: HarnessEvidence, shared: int) -> str:
    gaps = len(evidence.a_only) + len(evidence.b_only)
    if not gaps:
        return (
            f"undecided: with the same model, no task of the {shared} both runs hold is solved "
            "under one harness and failed under the other"
        )
    sides = []
    for label, gap, other in (("A", evidence.a_only, "B"), ("B", evidence.b_only, "A")):
        if gap:
            kinds = _kinds(gap)
            sides.append(
                f"{len(gap)} task(s) pass under {label}'s harness and fail under {other}'s "
                f"({kinds})"
            )
    return (
        f"harness work: with the same model, {'; '.join(sides)}: the model can solve them, the "
        "harness lost them; the failing rollouts are the evidence"
    )


def _kinds(gaps: list[HarnessGap]) -> str:
    counts: dict[str, int] = {}
    for gap in gaps:
        for rollout in gap.failing:
            kind = rollout.failure_kind or "wrong answer"
            counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def as_lines(evidence: HarnessEvidence) -> list[str]:
    """The evidence as the CLI prints it."""
    lines = [f"harness: A = {evidence.harness_a}; B = {evidence.harness_b}", evidence.decision]
    for label, gaps in (("A only", evidence.a_only), ("B only", evidence.b_only)):
        for gap in gaps:
            failing = ", ".join(
                f"{r.rollout_id[:12]} ({r.failure_kind or f'reward {r.reward}'})"
                for r in gap.failing
            )
            lines.append(f"  {label}: {gap.task_id}: failing rollouts {failing}")
    return lines
