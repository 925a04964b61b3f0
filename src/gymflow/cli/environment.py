"""`gym env validate CONFIG [--ping]` and `gym env init NAME [--dir D]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli import exit_codes
from gymflow.cli.app import console, env_app, print_json
from gymflow.environments.registry import PATH_VARIABLE
from gymflow.environments.scaffold import scaffold
from gymflow.present.terminal import styled
from gymflow.rollouts.validate import validate_config


@env_app.command("validate")
def validate(
    config: Annotated[Path, typer.Argument(help="Eval config YAML to check.")],
    ping: Annotated[
        bool, typer.Option("--ping", help="Also send the model one tiny request.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check a config before spending compute; list every problem. Writes nothing."""
    report = validate_config(config, ping=ping)
    if as_json:
        print_json(report.as_json())
    else:
        for check in report.passed:
            console.print(styled(("ok  ", "green")), check)
        for problem in report.problems:
            console.print(styled(("FAIL", "bold red")), problem)
        verdict = "valid" if report.ok else f"{len(report.problems)} problem(s)"
        console.print(f"{config}: {verdict}", style="bold")
    if not report.ok:
        raise typer.Exit(exit_codes.BAD_INPUT)


@env_app.command("init")
def init(
    name: Annotated[str, typer.Argument(help="New environment name, e.g. my-env.")],
    directory: Annotated[
        Path, typer.Option("--dir", help="Folder to create it in (an environments folder).")
    ] = Path("."),
) -> None:
    """Scaffold a new environment (manifest, env.py, a benchmark) that validates as created."""
    created = scaffold(name, directory)
    for path in created:
        console.print(f"created {path}", highlight=False)
    root = directory.resolve()
    console.print(
        f"next: export {PATH_VARIABLE}={root}\n"
        f"      gym env validate {directory / name / 'eval.yaml'}",
        highlight=False,
    )
