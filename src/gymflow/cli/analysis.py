"""`gym eval health | profile | diagnose`: the numbers of a stored run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gymflow.analysis.compare import POWER_DIFFERENCE
from gymflow.cli import exit_codes
from gymflow.cli.app import (
    SIMULATED_LINE,
    console,
    eval_app,
    fail,
    print_json,
    warn_stale_report,
)
from gymflow.present import (
    coverage_text,
    format_counts,
    format_interval,
    format_number,
    format_percent,
    format_value,
    headline_text,
)
from gymflow.present.terminal import print_table, styled, table
from gymflow.store.db import connect

if TYPE_CHECKING:
    from gymflow.analysis.paired import PairedPower, Power
    from gymflow.analysis.results import Comparison, Profile, RunAnalysis, Seals, VersionRead

# Each command imports what only it runs (the health checks, the diagnosis) in its body:
# `gym eval profile` does not pay for the others.


@eval_app.command("profile")
def eval_profile(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verifier_version: Annotated[str | None, typer.Option(help="Verifier version to read.")] = None,
    failures_as_zero: Annotated[
        bool, typer.Option(help="Count failed rollouts as reward 0.")
    ] = False,
    compare_with: Annotated[
        Path | None,
        typer.Option("--compare", help="Second run: paired comparison, RUN_DIR minus this."),
    ] = None,
    compare_verifier_version: Annotated[
        str | None, typer.Option(help="Verifier version to read in the --compare run.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the bootstrap over tasks.")] = 0,
    power_difference: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="With --compare: the difference in share of tasks solved to find the tasks "
            "needed for (McNemar's test, 80% power).",
        ),
    ] = POWER_DIFFERENCE,
) -> None:
    """pass@1 with its task-clustered 95% CI, pass@k, pass^k and coverage; with --compare, a
    paired comparison of two runs."""
    from gymflow.analysis.compare import compare
    from gymflow.analysis.profile import profile

    con = connect(run_dir, read_only=True)
    try:
        result = profile(
            con,
            verifier_version=verifier_version,
            failures_as_zero=failures_as_zero,
            seed=seed,
        )
        if compare_with is not None:
            other = connect(compare_with, read_only=True)
            try:
                comparison = compare(
                    con,
                    other,
                    verifier_version_a=verifier_version,
                    verifier_version_b=compare_verifier_version,
                    failures_as_zero=failures_as_zero,
                    power_difference=power_difference,
                )
                other_profile = profile(
                    other,
                    verifier_version=compare_verifier_version,
                    failures_as_zero=failures_as_zero,
                    seed=seed,
                )
            finally:
                other.close()
        warn_stale_report(con, run_dir)
    finally:
        con.close()
    if compare_with is not None:
        profiles = {"a": result, "b": other_profile}
        if json_output:
            print_json(
                {
                    **comparison.as_json(),
                    "profiles": {side: p.as_json() for side, p in profiles.items()},
                }
            )
        else:
            print_comparison(comparison, profiles)
            print_seals(result.seals, f"A ({run_dir})")
            print_seals(other_profile.seals, f"B ({compare_with})")
        _exit_when_edited(result, other_profile)
        return
    if json_output:
        print_json(result.as_json())
    else:
        print_profile(result)
        print_seals(result.seals, str(run_dir))
    _exit_when_edited(result)


def print_seals(seals: Seals | None, where: str) -> None:
    """A store whose seals do not match, in red: its numbers above are not those sealed."""
    if seals is None or seals.intact is not False:
        return
    console.print(
        f"{where}: its seals do not match ({'; '.join(seals.edited)}): the numbers read from "
        "it are not those its writers sealed (gym eval health RUN --verify-seals)",
        style="bold red",
        markup=False,
        highlight=False,
    )


def _exit_when_edited(*profiles: Profile | None) -> None:
    """Exit 2 (an integrity failure) when a store read was edited: its numbers were printed,
    flagged, but a script reading only the exit code must not take them."""
    if any(p is not None and p.seals is not None and p.seals.intact is False for p in profiles):
        raise typer.Exit(exit_codes.GATE_FAILED)


def print_comparison(result: Comparison, profiles: dict[str, Profile]) -> None:
    """The comparison as text; `profiles` holds the profile of run "a" and of run "b"."""
    a, b = result.a, result.b
    for side in ("a", "b"):
        if profiles[side].simulated:
            console.print(f"{side.upper()}: {SIMULATED_LINE}", markup=False)
    console.print(
        styled(
            (result.benchmark, "bold"),
            f" {result.benchmark_version}: A = run {a.run_id} ({a.model}), "
            f"B = run {b.run_id} ({b.model})",
        )
    )
    for side in ("a", "b"):
        p = profiles[side]
        coverage = coverage_text(p.coverage)
        console.print(f"  {side.upper()}: {headline_text(p)}; coverage: {coverage}")
    console.print(
        styled(
            f"paired on {result.tasks} tasks, difference in pass rate: A - B = ",
            (format_percent(result.difference), "bold"),
            f" (SE {format_percent(result.stderr)}, 95% CI "
            f"{format_interval(result.ci95, result.ci95_reason)}, "
            f"p = {format_number(result.p_value, 4)}); correlation "
            f"{format_number(result.correlation, 2)}",
        )
    )
    console.print(f"  test: {result.test}", markup=False, soft_wrap=True)
    _print_power(result.power, "pass rate")
    unpaired = result.unpaired_task_ids
    for ids, label in ((unpaired.a_only, "A"), (unpaired.b_only, "B")):
        if ids:
            console.print(f"  not paired: {len(ids)} tasks scored in {label} only: {_listed(ids)}")
    m = result.mcnemar
    console.print(
        f"share solved by majority verdict: A {format_percent(result.solved_a)}, "
        f"B {format_percent(result.solved_b)}, A - B = {format_percent(result.solved_difference)}; "
        f"McNemar ({m.method}): {m.b} tasks solved only by A, {m.c} only by B, "
        f"p = {format_number(m.p_value, 4)}"
    )
    flipped = result.flipped
    for tasks, label in (
        (flipped.a_only, "solved only by A"),
        (flipped.b_only, "solved only by B"),
    ):
        if tasks:
            console.print(f"  {label}: {_listed(tasks)}")
    _print_power(result.majority_power, "share solved")
    majority = result.majority_power
    console.print(
        f"  (assuming {format_percent(majority.discordant_share)} of tasks solved by one run "
        "only, as here)"
    )
    for factor in result.factors:
        console.print(
            f"  differs: {factor.factor}: {format_value(factor.a)} vs {format_value(factor.b)}"
        )
    console.print(result.attribution)
    if result.harness is not None:
        from gymflow.analysis.harness_evidence import as_lines

        for line in as_lines(result.harness):
            console.print(line, markup=False, soft_wrap=True)


def _print_power(power: PairedPower | Power, quantity: str) -> None:
    """A test's minimum detectable difference and tasks needed, in the quantity it tests."""
    console.print(f"  power of {power.test}:", markup=False, soft_wrap=True)
    detectable = power.minimum_detectable_difference
    console.print(
        f"    minimum detectable difference in {quantity} at 80% power with "
        f"{power.tasks_now} tasks: "
        + (
            format_percent(detectable)
            if detectable is not None
            else f"none ({power.minimum_detectable_difference_reason})"
        ),
        markup=False,
    )
    needed = power.tasks_needed
    console.print(
        f"    tasks needed to detect {format_percent(power.difference)} in {quantity} at 80% "
        "power: "
        + (f"about {needed}" if needed is not None else f"n/a ({power.tasks_needed_reason})"),
        markup=False,
    )


def _listed(tasks: list[str]) -> str:
    return ", ".join(tasks[:10]) + (" …" if len(tasks) > 10 else "")


def print_version_read(read: VersionRead | None) -> None:
    """A run read under a reverify says so, with the reverify's parameters (its version's name
    alone read as the run's own verdicts)."""
    if read is not None and read.origin == "reverify":
        console.print(read.describe(), style="bold", markup=False, highlight=False, soft_wrap=True)


def print_profile(result: Profile) -> None:
    console.print(
        styled(
            (result.benchmark or result.environment or "no benchmark (imported)", "bold"),
            f" · {result.model} · verifier {result.verifier_version}",
        )
    )
    if result.simulated:
        console.print(SIMULATED_LINE)
    print_version_read(result.version_read)
    console.print(f"coverage: {coverage_text(result.coverage)} (failures {result.failures})")
    console.print(
        styled(
            (headline_text(result), "bold"),
            f", task-clustered; mean reward {format_number(result.mean_reward)}",
        )
    )
    console.print(result.weighting)
    grid = table("k", "tasks", "pass@k", "bootstrap 95% CI", "pass^k", "retry value")
    for k, value in result.pass_at_k.items():
        grid.add_row(
            k,
            str(result.tasks_at_k[k]),
            format_percent(value),
            format_interval(result.pass_at_k_bootstrap_ci95[k]),
            format_percent(result.pass_hat_k[k]),
            format_percent(result.retry_value[k]),
        )
    print_table(console, grid)
    console.print(
        "pass@k, pass^k and the retry value (pass@k - pass@1 on the same tasks) average over "
        "the tasks with at least k scored rollouts; a bootstrap CI needs two such tasks"
    )
    if result.majority_at_k:
        for k, value in result.majority_at_k.items():
            console.print(f"majority@{k} = {format_percent(value)}")
    variance = result.variance["pass"]
    if variance.icc is not None:
        console.print(
            f"variance (one-way ANOVA): between tasks {variance.between:.4f}, within tasks "
            f"{variance.within:.4f}; ICC(1) {variance.icc:.3f}, design effect "
            f"{result.design_effect:.2f}"
        )
    else:
        console.print(f"variance split: n/a ({variance.reason})")
    for title, groups in (("tag", result.by_tag), ("difficulty", result.by_difficulty)):
        if groups:
            breakdown = table(title, "tasks", "pass@1", "95% CI", keys=(title,))
            for name, group in groups.items():
                breakdown.add_row(
                    name,
                    str(group.tasks),
                    format_percent(group.pass_at_1),
                    format_interval(group.ci95, group.ci95_reason),
                )
            print_table(console, breakdown)
    usage = table("per rollout", "mean", "p50", "p90", "p99", "max")
    for name, stats in result.usage.items():
        usage.add_row(
            name,
            *(
                format_number(value, 4)
                for value in (stats.mean, stats.p50, stats.p90, stats.p99, stats.max)
            ),
        )
    print_table(console, usage)


def _parse_thresholds(values: list[str]) -> dict[str, float]:
    thresholds: dict[str, float] = {}
    for value in values:
        name, sep, share = value.partition("=")
        try:
            thresholds[name] = float(share)
        except ValueError:
            fail(f"--threshold {value!r}: expected CHECK=SHARE, e.g. incomplete_response=0.05")
        if not sep or not 0.0 <= thresholds[name] <= 1.0:
            fail(f"--threshold {value!r}: expected CHECK=SHARE with SHARE between 0 and 1")
    return thresholds


@eval_app.command("health")
def eval_health(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verifier_version: Annotated[
        str | None, typer.Option(help="Verifier version the verification checks read.")
    ] = None,
    max_share: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Share of expected rollouts an integrity check may flag."
        ),
    ] = 0.0,
    warning_max_share: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Share a warning check may flag (default: never fails)."
        ),
    ] = 1.0,
    threshold: Annotated[
        list[str] | None,
        typer.Option(help="Per-check allowance as CHECK=SHARE (repeatable)."),
    ] = None,
    max_listed: Annotated[
        int, typer.Option(min=0, help="Unhealthy rollouts listed in the JSON output.")
    ] = 1000,
    verify_seals: Annotated[
        bool,
        typer.Option(
            "--verify-seals",
            help="Recompute every seal, even when the store is unchanged since they matched.",
        ),
    ] = False,
) -> None:
    """Check every record; exit 2 when a check flags more than its allowed share of rollouts."""
    from gymflow.analysis.health import Gate, health

    gate = Gate(
        max_share=max_share,
        warning_max_share=warning_max_share,
        per_check=_parse_thresholds(threshold or []),
    )
    con = connect(run_dir, read_only=True)
    try:
        result = health(
            con,
            verifier_version=verifier_version,
            gate=gate,
            max_listed=max_listed,
            verify_seals=verify_seals,
        )
        warn_stale_report(con, run_dir)
    finally:
        con.close()
    if json_output:
        print_json(result.as_json())
    else:
        grid = table(
            "check", "kind", "status", "rollouts", "share", "allowed", "examples", keys=("check",)
        )
        for name, check in result.checks.items():
            style = {"failed": "red", "skipped": "yellow"}.get(check.status, "green")
            if check.status == "failed" and name in result.warnings:
                style = "yellow"
            grid.add_row(
                name,
                check.severity,
                styled((check.status, style)),
                str(check.count),
                format_percent(check.share, 2),
                format_percent(check.threshold, 2),
                ", ".join(check.examples[:3]),
            )
        print_table(console, grid)
        console.print(
            f"{result.unhealthy_rollouts} of {result.rollouts} rollouts unhealthy "
            f"({result.expected} expected); verdict: {result.verdict}; "
            f"gate: {result.gate}"
            + (f" ({', '.join(result.gate_failures)})" if result.gate_failures else "")
            + (f"; warnings: {', '.join(result.warnings)}" if result.warnings else "")
            + f"; verifier {result.verifier_version}"
        )
        print_version_read(result.version_read)
        for note in result.seal_notes:
            console.print(note, style="bold red", markup=False, highlight=False)
        if result.seals_checked_at is not None:
            console.print(
                f"seals: every one matched at {result.seals_checked_at:%Y-%m-%d %H:%M:%S} UTC, "
                "and the store is unchanged since (--verify-seals recomputes them)",
                markup=False,
            )
    if result.gate == "fail":
        raise typer.Exit(exit_codes.GATE_FAILED)


@eval_app.command("diagnose")
def eval_diagnose(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verifier_version: Annotated[str | None, typer.Option(help="Verifier version to read.")] = None,
    top: Annotated[int, typer.Option(min=0, help="Sometimes-pass tasks to show.")] = 20,
) -> None:
    """Outcome buckets, failure taxonomy, sometimes-pass tasks, verifier suspects, and the
    recommended next action (the same `decide` the flow's artifacts and the report read)."""
    from gymflow.analysis.run import analyse

    con = connect(run_dir, read_only=True)
    try:
        analysis = analyse(con, verifier_version=verifier_version, top=top)
        warn_stale_report(con, run_dir)
    finally:
        con.close()
    result, decision = analysis.diagnosis, analysis.decision
    seals = analysis.profile.seals
    if json_output:
        print_json(
            {
                **result.as_json(),
                "decision": decision.as_json(),
                "seals": None if seals is None else seals.as_json(),
            }
        )
    else:
        _print_diagnosis(analysis, top)
        # as profile: the numbers read, and in red that they are not those sealed (exit 2)
        print_seals(seals, str(run_dir))
    _exit_when_edited(analysis.profile)


def _print_diagnosis(analysis: RunAnalysis, top: int) -> None:
    """`gym eval diagnose`'s text: the buckets, taxonomy, sometimes-pass tasks, verifier
    suspects and the next action."""
    result, decision = analysis.diagnosis, analysis.decision
    console.print(f"run {result.run_id} · verifier {result.verifier_version}")
    if analysis.profile.simulated:
        console.print(SIMULATED_LINE)
    buckets = table("bucket", "tasks", "share")
    for name, bucket in result.buckets.items():
        buckets.add_row(name, str(bucket.tasks), format_percent(bucket.share))
    print_table(console, buckets)
    taxonomy = table("failure", "kind", "rollouts", "share", "examples")
    for row in result.taxonomy:
        taxonomy.add_row(
            row.category,
            row.kind,
            str(row.rollouts),
            format_percent(row.share),
            ", ".join(row.examples[:3]),
        )
    print_table(console, taxonomy)
    if result.missing_rollouts:
        console.print(f"missing rollouts: {result.missing_rollouts}")
    for task in result.sometimes_pass[:top]:
        passing = task.passing.rollout_id if task.passing else None
        failing = task.failing.rollout_id if task.failing else None
        console.print(
            styled(
                (task.task_id, "bold"),
                f" passes {task.c}/{task.n}: pass {passing} vs fail {failing}",
            )
        )
    for suspect in result.verifier_suspects:
        console.print(
            styled(
                ("verifier suspect", "yellow"),
                f" {suspect.kind}: {suspect.count} rollouts ({suspect.description}), "
                f"e.g. {', '.join(suspect.examples[:3])}",
            )
        )
    if decision.action is None:
        console.print(f"next action: none ({decision.why})")
        return
    console.print(styled((f"next action: {decision.label}", "bold"), f" — {decision.why}"))
    evidence = decision.evidence
    if evidence:
        console.print(
            f"  evidence: {evidence.rollouts} rollouts ({format_counts(evidence.categories)}), "
            f"e.g. {', '.join(evidence.examples[:3])}"
        )
    runner = decision.runner_up
    if runner:
        console.print(
            f"  runner-up: {runner.label} ({format_percent(runner.share)} of the evidence)"
        )
