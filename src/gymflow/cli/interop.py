"""`gym import nemo-gym` and `gym export`: rollouts in and out of gymflow stores."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli.app import app, console, fail, group, print_json
from gymflow.interop.export import FORMATS, export_run
from gymflow.interop.nemo_gym import import_rollouts

import_app = group("import")


@import_app.command("nemo-gym")
def import_nemo_gym(
    rollouts: Annotated[Path, typer.Argument(help="NeMo Gym rollouts JSONL file.")],
    out: Annotated[Path, typer.Option(help="Run directory to create.")],
    environment: Annotated[
        str | None,
        typer.Option(help="Match rows to this environment's tasks, so reverify can score them."),
    ] = None,
    pass_threshold: Annotated[
        float | None,
        typer.Option(help="Reward at which a row passes (default: the environment's, else 1)."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Read a NeMo Gym rollout file, and the _materialized_inputs / _failures files beside it,
    into a new gymflow store (rewards as verifier version `imported`)."""
    result = import_rollouts(rollouts, out, environment=environment, pass_threshold=pass_threshold)
    if json_output:
        print_json(result)
        return
    console.print(
        f"imported {result['rollouts']} rollouts of {result['tasks']} tasks "
        f"({result['repeats']} repeats) as run {result['run_id']} into {result['store']}",
        highlight=False,
        soft_wrap=True,
    )
    notes = [
        f"{result['failed']} failed (not scored)" if result["failed"] else "",
        f"{result['duplicates']} duplicate (task, rollout) pairs: see `gym eval health`"
        if result["duplicates"]
        else "",
        f"{result['missing']} requested but absent (missing)" if result["missing"] else "",
        *(
            f"read {name.replace('_', ' ')} from {path}"
            for name, path in result["sidecars"].items()
        ),
    ]
    for note in filter(None, notes):
        console.print(f"  {note}", highlight=False, soft_wrap=True)


@app.command("export")
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")],
    fmt: Annotated[str, typer.Option("--format", help=" | ".join(FORMATS))] = "jsonl",
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output file (default: in RUN_DIR). A symlink there is replaced, never "
            "followed; a device or FIFO, or a folder that is a symlink, is refused."
        ),
    ] = None,
    verifier_version: Annotated[
        str | None, typer.Option(help="Verifier version whose rewards to write (newest).")
    ] = None,
) -> None:
    """Write a run's rollouts as NeMo Gym rollout JSONL (with its _failures and
    _materialized_inputs files), flat JSONL or Parquet."""
    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    result = export_run(run_dir, fmt, out=out, verifier_version=verifier_version)
    console.print(
        f"wrote {result['rows']} rollouts ({result['format']}, verifier "
        f"{result['verifier_version']}) to {result['path']}",
        highlight=False,
        soft_wrap=True,
    )
    if fmt == "nemo-gym":
        console.print(
            f"  {result['failures']} failed to {result['failures_path']}, "
            f"{result['materialized_inputs']} requested to {result['materialized_inputs_path']}",
            highlight=False,
            soft_wrap=True,
        )
