"""The Typer application and the helpers every command shares."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer

from gymflow.cli import exit_codes, local_prefect
from gymflow.cli.commands import GROUPS
from gymflow.core.errors import RuntimeFailure
from gymflow.present.terminal import TextConsole, styled

# Prefect's defaults for gymflow, before Prefect reads them.
local_prefect.configure()

app = typer.Typer(
    name="gym",
    help="gymflow: evaluate LLM policies on verifiable environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_groups = {name: typer.Typer(help=text, no_args_is_help=True) for name, text in GROUPS.items()}
for _name, _group in _groups.items():
    app.add_typer(_group, name=_name)


def group(name: str) -> typer.Typer:
    """The Typer app of the command group `name` (`gymflow.cli.GROUPS`)."""
    return _groups[name]


eval_app, list_app, env_app, serve_app, data_app = map(
    group, ("eval", "list", "env", "serve", "data")
)

# Every string printed as text: markup off, control characters escaped (`present.terminal`).
console = TextConsole()
errors = TextConsole(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one error line and exit; `code` is one of `gymflow.cli.exit_codes` (1: bad usage,
    config or input)."""
    # soft wrap (the console's): one line stays one line in a log, whatever the terminal's width
    errors.print(styled(("error:", "bold red")), message, highlight=False)
    raise typer.Exit(code)


#: What every command reading a run prints when a simulated model answered it
#: (`gymflow.analysis.simulated`).
SIMULATED_LINE = "SIMULATED: gymflow's simulated policy server answered this run, not a real model"


def warn_stale_report(con, run_dir: Path) -> None:
    """One line on stderr when RUN_DIR/report.html was rendered under another verifier version
    than the one the run is read under now (a report is static: it cannot say so itself)."""
    from gymflow.reports.stamp import stale_report
    from gymflow.store.db import store_path
    from gymflow.store.verifier_versions import current_verifier_version

    warning = stale_report(store_path(run_dir).parent, current_verifier_version(con))
    if warning:
        errors.print(styled(("warning:", "bold yellow")), warning, highlight=False)


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
            f"{server.prefect.pid}, log {server.log}), with reports served at "
            f"{server.reports.url}; `gym server --stop` stops both",
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
