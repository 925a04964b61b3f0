"""`gym eval health | profile | diagnose`: the numbers of a stored run, straight from its store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gymflow.analysis.health import Gate, health
from gymflow.analysis.profile import profile
from gymflow.cli.app import console, eval_app, fail, print_json
from gymflow.store.db import StoreError, connect


@eval_app.command("profile")
def eval_profile(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verifier_version: Annotated[str | None, typer.Option(help="Verifier version to read.")] = None,
    failures_as_zero: Annotated[
        bool, typer.Option(help="Count failed rollouts as reward 0.")
    ] = False,
) -> None:
    """pass@1 with its task-clustered 95% CI, pass@k, pass^k and coverage."""
    try:
        con = connect(run_dir, read_only=True)
        try:
            result = profile(
                con, verifier_version=verifier_version, failures_as_zero=failures_as_zero
            )
        finally:
            con.close()
    except StoreError as exc:
        fail(str(exc))
    if json_output:
        print_json(result)
        return
    table = Table("metric", "value")
    for key in (
        "pass@1",
        "stderr",
        "ci95",
        "mean_reward",
        "coverage",
        "failures",
        "verifier_version",
    ):
        table.add_row(key, str(result[key]))
    for k, value in result["pass@k"].items():
        table.add_row(f"pass@{k}", f"{value}")
    console.print(table)


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
        typer.Option(min=0.0, max=1.0, help="Share of expected rollouts any check may flag."),
    ] = 0.0,
    threshold: Annotated[
        list[str] | None,
        typer.Option(help="Per-check allowance as CHECK=SHARE (repeatable)."),
    ] = None,
    max_listed: Annotated[
        int, typer.Option(min=0, help="Unhealthy rollouts listed in the JSON output.")
    ] = 1000,
) -> None:
    """Check every record; exit 1 when a check flags more than its allowed share of rollouts."""
    gate = Gate(max_share=max_share, per_check=_parse_thresholds(threshold or []))
    try:
        con = connect(run_dir, read_only=True)
        try:
            result = health(
                con, verifier_version=verifier_version, gate=gate, max_listed=max_listed
            )
        finally:
            con.close()
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    if json_output:
        print_json(result)
    else:
        table = Table("check", "status", "rollouts", "share", "allowed", "examples")
        for name, check in result["checks"].items():
            style = {"failed": "red", "skipped": "yellow"}.get(check["status"], "green")
            table.add_row(
                name,
                f"[{style}]{check['status']}[/]",
                str(check["count"]),
                f"{check['share']:.2%}",
                f"{check['threshold']:.2%}",
                ", ".join(check["examples"][:3]),
            )
        console.print(table)
        console.print(
            f"{result['unhealthy_rollouts']} of {result['rollouts']} rollouts unhealthy "
            f"({result['expected']} expected); verdict: {result['verdict']}; "
            f"gate: {result['gate']}"
            + (f" ({', '.join(result['gate_failures'])})" if result["gate_failures"] else "")
        )
    if result["gate"] == "fail":
        raise typer.Exit(1)
