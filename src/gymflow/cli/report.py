"""`gym report`: the self-contained HTML decision report of a stored run, or of two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli import exit_codes
from gymflow.cli.app import app, console, fail


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    compare: Annotated[
        Path | None, typer.Option(help="A second run: write a paired comparison report.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="HTML file to write (default: report.html, or compare.html, in RUN_DIR)."
        ),
    ] = None,
    verifier_version: Annotated[
        str | None, typer.Option(help="Verifier version to read (default: the run's current one).")
    ] = None,
) -> None:
    """Write the HTML report: opens offline, readable without JavaScript."""
    from gymflow.cli.analysis import print_seals
    from gymflow.reports.render import export_path, write_report

    if compare is not None and verifier_version is not None:
        fail("--verifier-version applies to a single-run report, not to --compare")
    written = write_report(run_dir, out=out, compare_dir=compare, verifier_version=verifier_version)
    path = written.path
    from gymflow.reports.stamp import rendered_verifier_version

    version = rendered_verifier_version(path)
    under = f" (verifier {version})" if version else ""
    console.print(f"report: {path.resolve()}{under}", highlight=False, soft_wrap=True)
    export = export_path(path)
    if export.exists():
        console.print(f"trajectories: {export.resolve()}", highlight=False, soft_wrap=True)
    # as profile: written with the numbers read, in red that they are not those sealed (exit 2)
    for where, seals in written.edited:
        print_seals(seals, where)
    if written.edited:
        raise typer.Exit(exit_codes.GATE_FAILED)
