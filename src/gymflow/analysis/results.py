"""The typed results of a run's analysis: health, profile, diagnosis and the decision.

Each is a frozen pydantic model whose fields are the keys `gym eval ... --json` prints; a key
that is not a Python name (`pass@1`, `pass^k`) is the field's alias. `as_json()` gives the JSON
object (aliases as keys, in field order) and `model_validate` reads it back, so a result
survives Prefect's cache (persisted as JSON: see `gymflow.steps.analysis`) unchanged.

Numbers are `int | float`, not `float`: pydantic would turn an int into a float, and the JSON
would print `3.0` where it printed `3`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gymflow.analysis.paired import PairedPower, Power

Number = int | float


@dataclass(frozen=True, slots=True)
class Coverage:
    """expected = tasks x repeats; scored + failed + missing = expected."""

    expected: int
    scored: int
    failed: int
    missing: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Result(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    def as_json(self) -> dict[str, Any]:
        """The JSON object the CLI prints: aliases as keys, in field order."""
        return self.model_dump(by_alias=True)


class HealthCheck(Result):
    description: str
    level: Literal["rollout", "run", "task"]
    severity: Literal["integrity", "warning"]
    #: the share of expected rollouts this check may flag before it fails the run
    threshold: Number
    status: Literal["ok", "failed", "skipped"]
    count: int
    share: Number
    examples: list[str]


class VersionRead(Result):
    """The verifier version a result reads, and what made it: the verdicts the run was judged
    with (collected or imported), or a reverify of stored rollouts, with its parameters. A run
    read under a reverify (`use-version`, `--make-current`) said only the version's name, and a
    reader could not tell its numbers came from other parameters than the run's."""

    version: str
    verifier: str
    params: dict[str, Any]
    origin: Literal["run", "reverify"]
    #: as stored: "gymflow", "nemo-gym import of FILE", "reverify from VERSION"
    source: str | None
    #: the version a reverify started from; None for the run's own
    reverified_from: str | None
    #: the version the run was judged under when collected
    judged_under: str | None

    def describe(self) -> str:
        """One line in words, for a terminal."""
        if self.origin == "run":
            return f"verifier {self.version} (the run's own verdicts)"
        return (
            f"verifier {self.version}: a REVERIFY of the stored rollouts (from "
            f"{self.reverified_from or 'no stored version'}; the run was judged under "
            f"{self.judged_under or 'no version'}) with parameters "
            + json.dumps(self.params, sort_keys=True)
        )


class Health(Result):
    """Can the run's numbers be trusted? (`gymflow.analysis.health.health`)"""

    #: "unhealthy" when an integrity check flags more than its threshold: the same thresholds
    #: the gate reads, so a run the gate passes is never called unhealthy for an integrity check
    verdict: Literal["healthy", "unhealthy"]
    #: checks that flagged something yet leave the verdict healthy (warnings, or integrity
    #: checks within their threshold)
    warnings: list[str]
    gate: Literal["pass", "fail"]
    gate_failures: list[str]
    failing_checks: list[str]
    rollouts: int
    expected: int
    unhealthy_rollouts: int
    unhealthy_share: Number
    verifier_version: str
    #: what made that version (the run's verdicts, or a reverify and its parameters); None
    #: only in a result cached before it was recorded
    version_read: VersionRead | None = None
    reward_range: list[Number] | None
    checks: dict[str, HealthCheck]
    rollout_verdicts: list[dict[str, Any]]
    rollout_verdicts_truncated: bool
    #: when every seal was last recomputed and matched, when this check took that result for
    #: the store's unchanged file (`store/checked_stores.py`); None: recomputed now (or not
    #: sealed by this machine's key)
    seals_checked_at: datetime | None = None
    #: what the seals say that no count shows, one line each naming the store (an older state
    #: of it put back: both generations)
    seal_notes: list[str] = Field(default_factory=list)

    @property
    def broken(self) -> list[str]:
        """The checks that make the verdict unhealthy."""
        return [name for name in self.failing_checks if name not in self.warnings]


class Headline(Result):
    """The few numbers a summary line needs, without bootstrap or breakdowns
    (`gymflow.analysis.profile.headline`): pass@k for k = repeats only."""

    verifier_version: str
    coverage: Coverage
    pass_at_1: Number | None = Field(alias="pass@1")
    stderr: Number | None
    ci95: list[Number] | None
    pass_at_k: dict[str, Number | None] = Field(alias="pass@k")
    #: the tasks pass@k averages over (those with at least k scored rollouts)
    tasks_at_k: dict[str, int]
    mean_reward: Number | None


class Estimate(Result):
    """pass@1 of a group of tasks (a tag, a difficulty) with its task-clustered CI."""

    tasks: int
    pass_at_1: Number | None = Field(alias="pass@1")
    stderr: Number | None
    ci95: list[Number] | None
    ci95_reason: str | None


class Variance(Result):
    """One-way random-effects ANOVA over tasks (`gymflow.analysis.stats.variance_components`);
    None, with `reason`, where undefined."""

    between: Number | None
    within: Number | None
    total: Number | None
    icc: Number | None
    repeats_per_task: Number | None
    reason: str | None


class Usage(Result):
    """Percentiles of one per-rollout column (tokens, turns, model calls, latency)."""

    mean: Number | None
    p50: Number | None
    p90: Number | None
    p99: Number | None
    max: Number | None


class Seals(Result):
    """What the seals say of the store a result was read from (`analysis.seals`): whether its
    numbers are those its writers sealed."""

    #: `sealed` (this machine's key: checked), `unsealed` (written before the seal), `foreign`
    #: (another key: not checkable here) or `stripped` (this machine sealed it; seals removed)
    state: str
    #: True: every seal matched; False: the store was edited (`edited` says what); None: not
    #: checkable with this machine's key
    intact: bool | None
    edited: list[str]
    #: when every seal was last recomputed and matched, for an unchanged file; None: now
    checked_at: datetime | None = None


class Profile(Result):
    """pass@1 with its CI, pass@k, pass^k, coverage (`gymflow.analysis.profile.profile`)."""

    run_id: str
    benchmark: str | None
    environment: str | None
    model: str | None
    #: a simulated model answered (`gymflow.analysis.simulated`), not a real one
    simulated: bool
    verifier_version: str
    #: what made that version (the run's verdicts, or a reverify and its parameters); None
    #: only in a result cached before it was recorded
    version_read: VersionRead | None = None
    coverage: Coverage
    failures: str
    tasks: int
    tasks_scored: int
    repeats: int
    pass_at_1: Number | None = Field(alias="pass@1")
    stderr: Number | None
    ci95: list[Number] | None
    ci95_reason: str | None
    ci95_method: str
    pass_at_1_rollout_weighted: Number | None = Field(alias="pass@1_rollout_weighted")
    weighting: str
    pass_at_k: dict[str, Number | None] = Field(alias="pass@k")
    pass_hat_k: dict[str, Number | None] = Field(alias="pass^k")
    tasks_at_k: dict[str, int]
    retry_value: dict[str, Number | None]
    pass_at_k_bootstrap_ci95: dict[str, list[Number] | None] = Field(alias="pass@k_bootstrap_ci95")
    pass_at_k_bootstrap_ci95_reason: dict[str, str | None] = Field(
        alias="pass@k_bootstrap_ci95_reason"
    )
    bootstrap: dict[str, Any]
    majority_at_k: dict[str, Number | None] | None = Field(alias="majority@k")
    mean_reward: Number | None
    mean_reward_stderr: Number | None
    mean_reward_ci95: list[Number] | None
    mean_reward_ci95_reason: str | None
    reward_range: list[Number]
    #: {"pass": ..., "reward": ...}
    variance: dict[str, Variance]
    design_effect: Number | None
    by_tag: dict[str, Estimate]
    by_difficulty: dict[str, Estimate]
    usage: dict[str, Usage]
    #: the store's seals, checked as health checks them; None only in a result cached before
    seals: Seals | None = None


class Bucket(Result):
    """The tasks of one outcome bucket (always, sometimes, never pass; missing)."""

    tasks: int
    #: of all tasks
    share: Number
    task_ids: list[str]


class TaxonomyRow(Result):
    """Non-passing rollouts of one category and kind."""

    category: str
    kind: str
    rollouts: int
    examples: list[str]
    #: of all non-passing rollouts
    share: Number


class FailureRow(Result):
    """Non-passing rollouts of one category and kind on tasks of one bucket."""

    category: str
    kind: str
    bucket: str
    rollouts: int
    examples: list[str]


class Side(Result):
    """The first passing (or failing) rollout of a sometimes-pass task."""

    rollout_id: str
    repeat_index: int
    output: str | None


class SometimesPass(Result):
    """A task that passed in some repeats and failed in others."""

    task_id: str
    n: int
    c: int
    pass_rate: Number
    #: p(1 - p): the tasks are listed most variable first
    variance: Number
    passing: Side | None
    failing: Side | None


class Suspect(Result):
    """Rollouts whose verdict looks wrong, of one kind (`verifier_suspects`)."""

    kind: str
    description: str
    count: int
    examples: list[str]


class EvidencePattern(Result):
    """Tasks that share one count of evidence per class (`gymflow.analysis.evidence`)."""

    bucket: str
    #: evidence class -> rollouts of one such task (classes with none left out)
    counts: dict[str, int]
    tasks: int


class Evidence(Result):
    """What the stored rollouts show, by evidence class, for the hypotheses to be tested on."""

    classes: list[str]
    totals: dict[str, int]
    examples: dict[str, list[str]]
    patterns: list[EvidencePattern]
    #: "class|bucket" -> the first task ids (by id) with such evidence
    task_ids: dict[str, list[str]]
    #: tasks with at least one scored rollout (those without evidence included)
    tasks: int
    #: rollouts the output-token limit did not cut, without and with an answer in the form the
    #: verifier reads: whether a form is missing where nothing was cut
    uncut_formless: int
    uncut_formed: int
    repeats: int
    temperature: Number | None
    max_output_tokens: int | None
    #: the failure kinds of the rollouts an external agent lost (class `agent_failed`), and the
    #: run's agent recipe (`harness.agent`, None for another harness): what the experiment
    #: confirming harness work changes
    agent_kinds: dict[str, int] = Field(default_factory=dict)
    agent: str | None = None


class Diagnosis(Result):
    """Why tasks fail (`gymflow.analysis.diagnose.diagnose`); the decision is apart (`decide`)."""

    run_id: str
    verifier_version: str
    rollouts: int
    expected: int
    missing_rollouts: int
    non_passing_rollouts: int
    buckets: dict[str, Bucket]
    taxonomy: list[TaxonomyRow]
    failures_by_bucket: list[FailureRow]
    sometimes_pass: list[SometimesPass]
    verifier_suspects: list[Suspect]
    #: the evidence classes the decision's hypotheses are tested on (None: a result cached by
    #: an older gymflow)
    evidence: Evidence | None = None


class Experiment(Result):
    """The one-factor experiment that would confirm (or decide) a hypothesis, on the tasks it
    is about only (`gymflow.analysis.hypotheses`); `gym eval decide RUN --confirm` runs it."""

    action: str
    #: the one factor changed, as a dotted config key (`verifier_params` for a reverify)
    factor: str
    #: the config change, as nested keys over the run's own config
    change: dict[str, Any]
    #: rerun: new rollouts of `tasks`; reverify: the stored rollouts judged again (no model
    #: call); none: gymflow cannot run it (`how` says what would)
    kind: Literal["rerun", "reverify", "none"]
    tasks: list[str]
    #: what should happen if the hypothesis is right
    predicted: str
    how: str
    #: what the prediction is about, per task: its pass rate, or the share of its rollouts
    #: that end judged (an agent that lost them: they finish, whatever their verdict)
    measure: Literal["pass_rate", "judged_share"] = "pass_rate"


class Candidate(Result):
    """One next action as a hypothesis: its prediction, tested on the stored rollouts, and the
    evidence for it (the rollouts where the prediction holds)."""

    action: str
    label: str
    #: rollouts whose evidence supports it, and their share of all the evidence
    rollouts: int
    share: Number
    threshold: Number | None
    #: its prediction holds on the stored rollouts (and passes its threshold, where it has one)
    fired: bool
    #: evidence class -> rollouts
    categories: dict[str, int]
    examples: list[str]
    #: what the evidence is, in words: how the categories were weighed (the share of answers
    #: in another form, why truncated rollouts count here), shown beside the decision
    notes: list[str] = []
    #: the hypothesis and what it predicts the stored rollouts show
    hypothesis: str = ""
    prediction: str = ""
    #: tasks with evidence for it
    tasks: int = 0
    experiment: Experiment | None = None


class Decision(Result):
    """The one recommended next action (`gymflow.analysis.decide.decide`)."""

    #: None only when nothing is left to do (every stored rollout passed, the run is complete
    #: and healthy)
    action: str | None
    label: str | None
    why: str
    evidence: Candidate | None
    runner_up: Candidate | None
    candidates: list[Candidate]
    rules: str
    #: the share of bootstrap resamples of the tasks in which the recommended action (or, when
    #: undecided, the leader) wins by the rules; None when there was nothing to resample
    margin: Number | None = None
    resamples: int = 0
    #: when no action wins by the margin: the two it is undecided between
    undecided: list[str] = []
    #: what this run cannot show, and why (skill improvement with one repeat at temperature 0)
    cannot_show: list[str] = []
    #: the experiment that would confirm the recommendation, or decide between the two
    experiment: Experiment | None = None


class Confirmation(Result):
    """What `gym eval decide RUN --confirm` found: the experiment run as a small paired study on
    its tasks, and whether the predicted effect happened."""

    experiment: Experiment
    ran: bool
    #: the run directory of the rerun (None for a reverify)
    run_dir: str | None
    tasks: int
    #: the experiment's measure (pass rate, or judged share) on its tasks before (as stored)
    #: and after the change
    before: Number | None
    after: Number | None
    #: tasks that gained and lost: for the pass rate, that pass only after and only before;
    #: for the judged share, whose share rose and fell
    gained: int
    lost: int
    effect: bool
    why: str


class RunAnalysis(Result):
    """A run's four results, computed once and handed to the report, the artifacts, the log
    and the CLI."""

    health: Health
    profile: Profile
    diagnosis: Diagnosis
    decision: Decision


class ComparedRun(Result):
    """One side of a comparison."""

    run_id: str
    model: str | None
    verifier_version: str


class Factor(Result):
    """A recorded factor whose value differs between two runs (`gymflow.analysis.factors`)."""

    #: its name: the dotted config key, or a word for what the run resolved or recorded
    factor: str
    #: the dotted key in the run's recorded factors
    key: str
    #: the study's unit of one thing at a time this factor belongs to
    group: str
    a: Any
    b: Any


class McNemar(Result):
    """McNemar's test on the discordant tasks: b solved by A only, c by B only."""

    b: int
    c: int
    method: str
    statistic: Number
    p_value: Number


class TaskIds(Result):
    """Task ids of A only and of B only."""

    a_only: list[str]
    b_only: list[str]


class TaskCounts(Result):
    a_only: int
    b_only: int


class Paired(Result):
    """Paired statistics of per-task pass rates (`gymflow.analysis.compare.paired`).

    The verdict is one test, `test` (the paired t on pass-rate differences): difference = A - B,
    its stderr, ci95, p_value and power are all that test's. The share solved by majority
    verdict is a second quantity with its own test: solved_difference, mcnemar and
    majority_power are McNemar's."""

    tasks: int
    mean_a: Number | None
    mean_b: Number | None
    test: str
    difference: Number | None
    stderr: Number | None
    ci95: list[Number] | None
    ci95_reason: str | None
    p_value: Number | None
    correlation: Number | None
    power: PairedPower
    solved_a: Number | None
    solved_b: Number | None
    solved_difference: Number | None
    mcnemar: McNemar
    #: tasks solved (by majority) in one run only
    flipped: TaskIds
    majority_power: Power


class ComparisonRuns(Result):
    """What a comparison compares: the runs, the factors that differ, the tasks left unpaired."""

    a: ComparedRun
    b: ComparedRun
    benchmark: str | None
    benchmark_version: str | None
    factors: list[Factor]
    attribution: str
    unpaired_tasks: TaskCounts
    #: tasks scored in one run only, left out of the pairing
    unpaired_task_ids: TaskIds
    outcome: str
    binary_outcome: str


# -- harness comparison (gymflow.analysis.harness_evidence) ----------------------------------------
class FailingRollout(Result):
    rollout_id: str
    repeat_index: int
    status: str
    failure_kind: str | None
    reward: float | None


class HarnessGap(Result):
    """A task one harness solves and the other does not, with the other's failing rollouts."""

    task_id: str
    passes: int
    rollouts: int
    failing: list[FailingRollout]


class HarnessEvidence(Result):
    """What a harness comparison says: the tasks only A's harness solves (`a_only`), those only
    B's solves (`b_only`), and the reading: harness work when any task is solved by one harness
    alone, with the failing rollouts as its evidence."""

    harness_a: str
    harness_b: str
    a_only: list[HarnessGap]
    b_only: list[HarnessGap]
    decision: str


class Comparison(Paired, ComparisonRuns):
    """Run A compared with run B, paired on task_id (`gymflow.analysis.compare.compare`). The
    bases' order puts ComparisonRuns's fields first in the JSON."""

    #: when only the harness differs: the tasks one harness solves and the other does not
    harness: HarnessEvidence | None = None
