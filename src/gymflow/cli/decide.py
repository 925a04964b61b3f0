"""`gym eval decide`: the recommended next action as a hypothesis tested on the stored rollouts,
with its margin over resampled tasks, what the run cannot show, and the one-factor experiment
that would confirm it; `--confirm` runs that experiment as a small paired study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli.app import SIMULATED_LINE, console, eval_app, print_json
from gymflow.present import format_counts, format_percent
from gymflow.present.terminal import print_table, styled, table
from gymflow.store.db import connect


@eval_app.command("decide")
def eval_decide(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    confirm: Annotated[
        bool,
        typer.Option(
            "--confirm",
            help="Run the decision's one-factor experiment on the affected tasks (a rerun "
            "into RUN/confirm/, or a reverify that makes no model call) and say whether the "
            "predicted effect happened.",
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verifier_version: Annotated[str | None, typer.Option(help="Verifier version to read.")] = None,
) -> None:
    """The next action as a hypothesis: its prediction, the evidence where it holds, its margin
    over bootstrap resamples of the tasks (or "undecided between" two), what the run cannot
    show, and the experiment that would confirm it."""
    from gymflow.analysis.run import analyse

    con = connect(run_dir, read_only=True)
    try:
        analysis = analyse(con, verifier_version=verifier_version)
    finally:
        con.close()
    decision = analysis.decision
    confirmation = None
    if confirm:
        from gymflow.study.confirm import confirm as run_confirm

        confirmation = run_confirm(run_dir, decision.experiment)
    if json_output:
        print_json(
            {
                "decision": decision.as_json(),
                "confirmation": confirmation.as_json() if confirmation else None,
            }
        )
        return
    if analysis.profile.simulated:
        console.print(SIMULATED_LINE)
    if decision.action is None:
        console.print(f"next action: none ({decision.why})")
        return
    console.print(styled((f"next action: {decision.label}", "bold"), f" — {decision.why}"))
    if decision.margin is not None:
        console.print(
            f"  margin: wins {format_percent(decision.margin)} of {decision.resamples} "
            "bootstrap resamples of the tasks"
        )
    grid = table("hypothesis", "prediction holds on", "share", "tasks", "evidence")
    for c in sorted(decision.candidates, key=lambda c: -c.rollouts):
        if not c.rollouts:
            continue
        grid.add_row(
            c.label,
            f"{c.rollouts} rollout(s)",
            format_percent(c.share),
            str(c.tasks),
            format_counts(c.categories) or "-",
        )
    print_table(console, grid)
    for line in decision.cannot_show:
        console.print(styled(("cannot show", "yellow"), f" {line}"))
    experiment = decision.experiment
    if experiment is not None:
        console.print(
            f"experiment ({experiment.kind}, {experiment.factor}, {len(experiment.tasks)} "
            f"task(s)): {experiment.how}; predicted: {experiment.predicted}"
        )
    if confirmation is not None:
        style = "green" if confirmation.effect else "yellow"
        verdict = "confirmed" if confirmation.effect else "not confirmed"
        if not confirmation.ran:
            verdict, style = "not run", "yellow"
        console.print(styled((f"outcome: {verdict}", f"bold {style}"), f" — {confirmation.why}"))
        if confirmation.run_dir:
            console.print(f"  experiment run: {confirmation.run_dir}")
