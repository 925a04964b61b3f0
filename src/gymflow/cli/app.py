"""The Typer application and the helpers every command shares."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from gymflow.cli import exit_codes, local_prefect
from gymflow.errors import RuntimeFailure

# Prefect's defaults for gymflow, and the local server if one runs, before Prefect reads them.
local_prefect.configure()

app = typer.Typer(
    name="gym",
    help="gymflow: evaluate LLM policies on verifiable environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
eval_app = typer.Typer(help="Run, check, profile and diagnose evaluations.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")
list_app = typer.Typer(help="List environments and benchmarks.", no_args_is_help=True)
app.add_typer(list_app, name="list")
env_app = typer.Typer(help="Check and scaffold environments and configs.", no_args_is_help=True)
app.add_typer(env_app, name="env")
serve_app = typer.Typer(help="Serve a model or an environment over HTTP.", no_args_is_help=True)
app.add_typer(serve_app, name="serve")
data_app = typer.Typer(
    help="Training data from a run: select tasks, export trajectories, profile.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one error line and exit; `code` is one of `gymflow.cli.exit_codes` (1: bad usage,
    config or input)."""
    # soft_wrap: one line stays one line in a log, whatever the terminal's width
    errors.print(Text("error: ", style="bold red") + Text(message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


#: What every command reading a run prints when a simulated model answered it
#: (`gymflow.analysis.simulated`).
SIMULATED_LINE = "SIMULATED: gymflow's simulated policy server answered this run, not a real model"


def warn_stale_report(con, run_dir: Path) -> None:
    """One line on stderr when RUN_DIR/report.html was rendered under another verifier version
    than the one the run is read under now (a report is static: it cannot say so itself)."""
    from gymflow.reports.stamp import stale_report
    from gymflow.store.current import current_verifier_version
    from gymflow.store.db import store_path

    warning = stale_report(store_path(run_dir).parent, current_verifier_version(con))
    if warning:
        errors.print(
            Text("warning: ", style="bold yellow") + Text(warning), highlight=False, soft_wrap=True
        )


def prefect_for_run() -> None:
    """Before a command runs a flow (and imports Prefect): the local Prefect server it will use,
    started on first use on a terminal (`local_prefect.for_run`), with a line saying so."""
    try:
        server = local_prefect.for_run(on_terminal=console.is_terminal)
    except RuntimeFailure as exc:
        hint = f"or set {local_prefect.MODE_ENV}=off for an ephemeral server"
        fail(f"{exc} ({hint})", exit_codes.RUNTIME)
    if server is not None:
        ui = server.api_url.removesuffix("/api")
        errors.print(
            f"started a local Prefect server that this and later gym commands use: {ui} (pid "
            f"{server.pid}, log {server.log}); `gym server --stop` stops it",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def _finite(value: Any) -> Any:
    """NaN and ±Infinity as null: JSON has no such numbers, and strict parsers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def print_json(payload: Any) -> None:
    text = json.dumps(_finite(payload), indent=2, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")
