"""`gym eval migrate`: a store sealed by an earlier gymflow, checked in full and sealed as this
one does (`store/migration.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli.app import console, eval_app, print_json
from gymflow.store.db import connect


@eval_app.command("migrate")
def eval_migrate(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check every seal of a store an earlier gymflow sealed, in full, and seal it as this
    gymflow does (its data unchanged); refused, with nothing written, when a seal does not
    match."""
    from gymflow.store.migration import migrate

    con = connect(run_dir)
    try:
        done = migrate(con)
    finally:
        con.close()
    if json_output:
        print_json({"seal_record_version_before": done.before, "seal_record_version": done.after})
        return
    if done.before == done.after:
        console.print(
            f"{run_dir}: every seal checked; already sealed as this gymflow does "
            f"(seal record version {done.after})",
            markup=False,
        )
        return
    console.print(
        f"{run_dir}: every seal checked; sealed as this gymflow does (seal record version "
        f"{done.before} -> {done.after})",
        markup=False,
    )
