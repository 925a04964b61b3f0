"""`gym eval profile`: the numbers of a stored run, straight from its store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

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
