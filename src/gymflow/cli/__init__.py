"""The `gym` command (also installed as `gymflow`). Each verb group lives in its own module of
this package and registers its commands on the Typer apps of `gymflow.cli.app` when imported;
every module here is imported.

`main` turns every way a command can end into one of `exit_codes` and, for an error, one line:
usage errors included (click's own code, 2, would read as a failed gate), and every
`gymflow.errors.GymflowError` with its class's exit code. Any other exception is a gymflow bug:
its traceback is printed, always, above the line that says so."""

from __future__ import annotations

import importlib
import pkgutil
import traceback

import duckdb
import typer
from rich.text import Text

from gymflow.cli import exit_codes
from gymflow.cli.app import app, errors
from gymflow.errors import GymflowError

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "__main__":  # `python -m gymflow.cli`, which imports this package
        importlib.import_module(f"{__name__}.{_module.name}")


def _error(message: str) -> None:
    errors.print(Text("error: ", style="bold red") + Text(message), highlight=False, soft_wrap=True)


def main() -> None:
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
