"""The `gym` command (also installed as `gymflow`). Each verb group lives in its own module of
this package and registers its commands on the Typer apps of `gymflow.cli.app` when imported;
`main` imports the one a command needs (`COMMAND_MODULES`), or all of them.

`main` turns every way a command can end into one of `exit_codes` and, for an error, one line:
usage errors included (click's own code, 2, would read as a failed gate), and every
`gymflow.errors.GymflowError` with its class's exit code. Any other exception is a gymflow bug:
its traceback is printed, always, above the line that says so."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback

import duckdb
import typer
from rich.text import Text

from gymflow.cli import exit_codes
from gymflow.cli.app import app, errors
from gymflow.errors import GymflowError

#: The module that registers each command. A command imports only its own module (and what that
#: imports): importing all of them took ~1 s (polars, numpy, the analysis and report modules)
#: before any command ran. Anything not listed here (`gym --help`, `gym eval --help`, a typo)
#: imports every module, so Typer lists or suggests all commands. tests/test_cli_commands.py
#: checks this table against what the modules register.
COMMAND_MODULES: dict[tuple[str, ...], str] = {
    ("eval", "run"): "evaluate",
    ("demo",): "evaluate",
    ("eval", "aggregate"): "scale",
    ("server",): "scale",
    ("eval", "profile"): "analysis",
    ("eval", "health"): "analysis",
    ("eval", "diagnose"): "analysis",
    ("eval", "reverify"): "analysis",
    ("eval", "use-version"): "analysis",
    ("data",): "data",
    ("list",): "discover",
    ("search",): "discover",
    ("env",): "environment",
    ("import",): "interop",
    ("export",): "interop",
    ("report",): "report",
    ("runs",): "runs",
    ("serve", "environment"): "serve_environment",
    ("serve", "model"): "serve_model",
    ("serve", "reports"): "serve_reports",
    ("study",): "study",
}


def command_modules(argv: list[str]) -> list[str]:
    """The modules to import for a command line (`argv` without the program name)."""
    for words in (tuple(argv[:2]), tuple(argv[:1])):
        if words in COMMAND_MODULES:
            return [COMMAND_MODULES[words]]
    return [m.name for m in pkgutil.iter_modules(__path__) if m.name != "__main__"]


def _register(argv: list[str]) -> None:
    for name in command_modules(argv):
        importlib.import_module(f"{__name__}.{name}")


def _error(message: str) -> None:
    errors.print(Text("error: ", style="bold red") + Text(message), highlight=False, soft_wrap=True)


def main() -> None:
    _register(sys.argv[1:])
    try:
        code = app(standalone_mode=False)
    except typer.Abort:  # Ctrl-C outside a run's own handling
        _error("interrupted")
        code = exit_codes.INTERRUPTED
    except typer.TyperException as exc:  # a usage error: Typer shows it with the usage line
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            _error(str(exc))
        code = exit_codes.BAD_INPUT
    except GymflowError as exc:
        _error(str(exc))
        code = exc.exit_code
    except duckdb.IOException as exc:
        # A store whose header opened but whose data blocks cannot be read: cut short on disk.
        # Caught here, not where the store is opened: any later query may read a broken block.
        _error(f"store unreadable (truncated or corrupt?): {exc}")
        code = exit_codes.BAD_INPUT
    except KeyboardInterrupt:
        _error("interrupted")
        code = exit_codes.INTERRUPTED
    except Exception as exc:
        traceback.print_exc()
        summary = " ".join(str(exc).split())[:500]
        _error(
            f"unexpected {type(exc).__name__}: {summary} (this is a gymflow bug: please report "
            "it with the traceback above)"
        )
        code = exit_codes.RUNTIME
    raise SystemExit(code if isinstance(code, int) else exit_codes.OK)
