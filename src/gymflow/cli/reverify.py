"""`gym eval reverify | use-version`: new verdicts from stored rollouts, their check, and which
stored verifier version a run is read under."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli import exit_codes
from gymflow.cli.app import console, eval_app, fail, print_json, warn_stale_report
from gymflow.present import format_interval, format_percent, format_value
from gymflow.present.terminal import print_table, styled, table
from gymflow.store.db import connect

# Each command imports what only it runs (the verifiers of a reverify) in its body.


@eval_app.command("reverify")
def eval_reverify(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Verifier parameter as KEY=VALUE (repeatable); none: the environment's "
            "verifier as it is now.",
        ),
    ] = None,
    failed_only: Annotated[
        bool, typer.Option(help="Judge again only rollouts the base version did not pass.")
    ] = False,
    force: Annotated[
        bool, typer.Option(help="Reverify even environments that verify live session state.")
    ] = False,
    base_version: Annotated[
        str | None,
        typer.Option(
            "--from-version",
            help="Base verifier version, or the one --check checks (the current one).",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing: judge the stored rollouts again under the version's own "
            "parameters and exit 2 listing every stored verdict that differs (an edited store).",
        ),
    ] = False,
    make_current: Annotated[
        bool,
        typer.Option(
            help="Read the run under the new version from now on (profile, diagnose, reports, "
            "history, data); otherwise the current version stays."
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """New rewards from stored rollouts under changed verifier parameters (or, without --set,
    the environment's verifier as it is now); no inference. The result is a new verifier
    version beside the old one; under a version already stored, verifications that errored or
    timed out are judged again (and, without --failed-only, the passes a --failed-only reverify
    carried from its base version). The run is read under the new version only with
    --make-current (or `gym eval use-version`)."""
    from gymflow.reverify.new_version import parse_settings, reverify

    if check:
        if settings or failed_only or force or make_current:
            fail("--check judges a stored version under its own parameters: it takes no --set, "
                 "--failed-only, --force or --make-current")  # fmt: skip
        _recheck(run_dir, base_version, json_output)
        return
    result = reverify(
        run_dir,
        parse_settings(settings or []),
        failed_only=failed_only,
        force=force,
        base_version=base_version,
        make_current=make_current,
    )
    with connect(run_dir, read_only=True) as con:
        warn_stale_report(con, run_dir)
    if json_output:
        print_json(result.as_json())
        return
    console.print(
        styled(
            f"{result.environment}: {result.base_version} -> ",
            (result.new_version, "bold"),
            f" ({result.status}; {result.reverified} rollouts judged, params "
            f"{format_value(result.params)})",
        )
    )
    flipped = result.flips
    rollouts = flipped.rollouts
    console.print(
        f"flipped: {rollouts.count} rollouts ({len(rollouts.to_pass)} now pass, "
        f"{len(rollouts.to_fail)} now fail), {len(flipped.tasks)} tasks"
    )
    for label, ids in (("to_pass", rollouts.to_pass), ("to_fail", rollouts.to_fail)):
        if ids:
            console.print(f"  {label}: {', '.join(ids[:20])}" + (" …" if len(ids) > 20 else ""))
    grid = table("task", "passing before", "passing after", keys=("task",))
    for task in flipped.tasks[:50]:
        grid.add_row(task.task_id, str(task.passed_before), str(task.passed_after))
    if flipped.tasks:
        print_table(console, grid)
    for label, head in (("before", result.before), ("after", result.after)):
        if head:
            ((k, pass_at_k),) = head.pass_at_k.items()
            console.print(
                f"{label}: pass@1 {format_percent(head.pass_at_1)} (95% CI "
                f"{format_interval(head.ci95)}), pass@{k} {format_percent(pass_at_k)} "
                f"[{head.verifier_version}]"
            )
    if result.made_current or result.current_version == result.new_version:
        console.print(f"the run is read under {result.current_version} from now on", markup=False)
    else:
        console.print(
            f"the run is still read under {result.current_version} (profile, diagnose, reports, "
            f"history, data); to read it under the new version: gym eval use-version {run_dir} "
            f"{result.new_version}",
            markup=False,
            soft_wrap=True,
        )


def _recheck(run_dir: Path, version: str | None, json_output: bool) -> None:
    from gymflow.reverify.check import check

    result = check(run_dir, version)
    if json_output:
        print_json({**result.as_json(), "agrees": result.agrees})
    else:
        if result.judged:
            console.print(
                styled(
                    f"{result.environment} {result.version}: {result.checked} stored verdicts "
                    f"judged again, {result.agreed} agree, ",
                    (f"{result.count} differ", "bold red" if result.count else "bold"),
                    " (nothing written)",
                )
            )
        else:
            console.print(
                f"{result.environment} {result.version}: nothing judged (nothing written): "
                f"{result.unjudged_why}",
                style="bold red",
                markup=False,
                highlight=False,
            )
        if not result.params_named:
            console.print(
                f"version {result.version}'s stored parameters are not the ones its name "
                "hashes: they were edited in the store, and no verdict judged under them is "
                "evidence",
                style="bold red",
                markup=False,
                highlight=False,
            )
        if result.code_changed:
            console.print(
                "the verifier's code changed since this version was stored: a difference may "
                "be the code's, not an edit of the store",
                markup=False,
            )
        _print_seals(result)
        grid = table(
            "rollout", "task", "repeat", "stored", "judged again", keys=("rollout", "task")
        )
        for d in result.disagreements:
            grid.add_row(d.rollout_id, d.task_id, str(d.repeat_index), d.stored, d.recomputed)
        if result.disagreements:
            print_table(console, grid)
    if not result.agrees:
        raise typer.Exit(exit_codes.GATE_FAILED)


def _print_seals(result) -> None:
    """What the seals say (`store/seal.py`), beside the judging: the edits it cannot see."""
    from gymflow.store.seal import (
        CALLS_EDITED,
        INPUTS_EDITED,
        ROLLOUTS_EDITED,
        STRIPPED,
        TASK_LIST_EDITED,
        VERDICTS_EDITED,
    )

    edited = [
        (result.inputs_sealed, f"the run's inputs do not match their seal: {INPUTS_EDITED}"),
        (result.rollouts_sealed, f"the run's rollouts do not match their seal: {ROLLOUTS_EDITED}"),
        (result.calls_sealed, f"the run's model calls do not match their seal: {CALLS_EDITED}"),
        (result.verdicts_sealed, f"the run's verdicts do not match their seal: {VERDICTS_EDITED}"),
        (result.tasks_sealed, f"the run's task list does not match its seal: {TASK_LIST_EDITED}"),
        (result.generation_failure is None, result.generation_failure or ""),
    ]
    if result.seal_state == "stripped":
        edited.append((False, f"{result.seal_mismatches} verdicts lost their seals: {STRIPPED}"))
    elif result.seal_mismatches:
        examples = ", ".join(result.seal_examples[:5])
        said = (
            f"{result.seal_mismatches} verdicts do not match their seals: they, or the rollouts "
            f"they judged, were edited in the store (e.g. {examples})"
        )
        edited.append((False, said))
    for sealed, said in edited:
        if sealed is False:
            console.print(said, style="bold red", markup=False, highlight=False)
    if result.seal_state == "stripped" or result.seal_mismatches or result.generation_failure:
        return
    if result.seal_state == "foreign":
        console.print(
            "seals not checked: the store was sealed with a key this machine does not hold "
            "(set GYMFLOW_SEAL_KEY to the key that sealed it)",
            markup=False,
        )
    elif result.seal_state == "unsealed":
        console.print(
            "seals not checked: the store was written before gymflow sealed its verdicts",
            markup=False,
        )
    else:
        console.print("every verdict matches its seal", markup=False)


@eval_app.command("use-version")
def eval_use_version(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    version: Annotated[str, typer.Argument(help="A verifier version the store holds.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Read the run under VERSION from now on: profile, diagnose, reports, `gym runs`, trend and
    `gym data` read the current version unless told --verifier-version."""
    from gymflow.store.verifier_versions import (
        current_verifier_version,
        make_current,
        stored_versions,
    )

    con = connect(run_dir)
    try:
        before = current_verifier_version(con)
        make_current(con, version)
        known = stored_versions(con)
        warn_stale_report(con, run_dir)
    finally:
        con.close()
    if json_output:
        print_json({"previous_version": before, "current_version": version, "versions": known})
        return
    console.print(f"{run_dir}: read under {version} from now on (was {before})", markup=False)
