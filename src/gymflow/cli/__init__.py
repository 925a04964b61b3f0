"""The `gym` command (also installed as `gymflow`). Each verb group lives in its own module of
this package and registers its commands on the Typer apps of `gymflow.cli.app` when imported.
`main` imports the one module a command line names (`COMMANDS`); a line that names no command
(`gym --help`, `gym eval`, a typo) imports none of them: the command lists are drawn from the
summaries in the command table (`commands`), so listing what exists costs no analysis, store
or Prefect import.

`main` turns every way a command can end into one of `exit_codes` and, for an error, one line:
usage errors included (click's own code, 2, would read as a failed gate), and every
`gymflow.core.errors.GymflowError` with its class's exit code. Any other exception is a gymflow
bug: its traceback is printed, always, above the line that says so.

Cut-off: the top floor; nothing imports it (the `gym` script calls `main`). Tier 6."""

from __future__ import annotations

import functools
import importlib
import sys
import traceback

import typer
import typer.main

from gymflow.cli import ending, exit_codes
from gymflow.cli.commands import COMMANDS, GROUPS
from gymflow.cli.imports import importing
from gymflow.core.errors import GymflowError
from gymflow.present.terminal import styled

__tier__ = 6

__all__ = ["COMMANDS", "GROUPS", "main"]


def command_module(argv: list[str]) -> str | None:
    """The module of the command a command line (`argv` without the program name) names."""
    for words in (tuple(argv[:2]), tuple(argv[:1])):
        if words in COMMANDS:
            return COMMANDS[words][0]
    return None


def _register(argv: list[str]) -> None:
    """Import the module of the command `argv` names; with none named, list every command by
    its summary (a command that only lists is never run: a line naming it imports its
    module)."""
    from gymflow.cli.app import app, group

    module = command_module(argv)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")
        return
    for words, (_, summary) in COMMANDS.items():
        target = group(words[0]) if len(words) == 2 else app
        target.command(words[-1], help=summary)(_listed)


def _listed() -> None:
    """A listed command's stand-in (see `_register`)."""


def _unreadable_store(exc: Exception) -> bool:
    """A DuckDB read error: a block it cannot read, or text in the file that is not UTF-8 (a
    block rewritten with its checksum kept: attack pass 5, s05); DuckDB is not imported to ask
    (a command that never opened a store cannot raise one)."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is None:
        return False
    return isinstance(exc, duckdb.IOException) or (
        isinstance(exc, duckdb.InvalidInputException) and "Invalid unicode" in str(exc)
    )


def _command_counts(app: typer.Typer) -> tuple[int, ...]:
    """How many commands `app` and each of its groups hold: what its click command is built
    from."""
    groups = (info.typer_instance for info in app.registered_groups)
    return (len(app.registered_commands), *(len(g.registered_commands) for g in groups if g))


@functools.lru_cache(maxsize=1)
def _click_command(app: typer.Typer, counts: tuple[int, ...]):
    """The click command Typer builds from `app`, built again only once a command was
    registered since (`counts`): with every command module imported, as in a process that
    runs many command lines (the tests' `gym_in_process`), a build took 70 ms of each."""
    del counts  # the cache's key only
    return typer.main.get_command(app)


def _error(message: str) -> None:
    from gymflow.cli.app import errors

    errors.print(styled(("error:", "bold red")), message, highlight=False, soft_wrap=True)


def main() -> None:
    with importing():
        _register(sys.argv[1:])
        from gymflow.cli.app import app

    try:
        code = _click_command(app, _command_counts(app))(standalone_mode=False)
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
    except KeyboardInterrupt:
        _error("interrupted")
        code = exit_codes.INTERRUPTED
    except Exception as exc:
        if _unreadable_store(exc):
            # A store whose header opened but whose data blocks cannot be read: cut short on
            # disk. Caught here, not where the store is opened: any later query may read a
            # broken block.
            _error(f"store unreadable (truncated or corrupt?): {exc}")
            code = exit_codes.BAD_INPUT
        else:
            traceback.print_exc()
            summary = " ".join(str(exc).split())[:500]
            _error(
                f"unexpected {type(exc).__name__}: {summary} (this is a gymflow bug: please "
                "report it with the traceback above)"
            )
            code = exit_codes.RUNTIME
    code = code if isinstance(code, int) else exit_codes.OK
    if ending.is_the_command():
        ending.exit_process(code)
    raise SystemExit(code)
