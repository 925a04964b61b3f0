"""`gym` imports only the module of the command it runs (`gymflow.cli.COMMAND_MODULES`): the table
must name, for every command, the module that registers it."""

from __future__ import annotations

import subprocess
import sys

import gymflow.cli as cli
from gymflow.cli.app import app


def _registered() -> dict[tuple[str, ...], str]:
    """Every command's words (group, name) and the module whose import registered it."""
    for name in cli.command_modules([]):  # no command: every module
        __import__(f"gymflow.cli.{name}")
    found = {(command.name,): command.callback.__module__ for command in app.registered_commands}
    for group in app.registered_groups:
        for command in group.typer_instance.registered_commands:
            found[(group.name, command.name)] = command.callback.__module__
    return {words: module.rpartition(".")[2] for words, module in found.items()}


def test_every_command_is_found_in_the_module_that_registers_it() -> None:
    registered = _registered()
    assert len(registered) > 20
    for words, module in registered.items():
        assert cli.command_modules(list(words)) == [module], words


def test_help_and_unknown_commands_import_every_module() -> None:
    every = cli.command_modules([])
    assert {"evaluate", "analysis", "scale", "study"} <= set(every)
    assert cli.command_modules(["--help"]) == every
    assert cli.command_modules(["eval", "--help"]) == every
    assert cli.command_modules(["evl", "run"]) == every


def test_a_run_does_not_import_the_analysis_commands() -> None:
    """`gym eval run --help` loads its own module, not the CLI's polars-backed analysis ones."""
    probe = (
        "import sys; sys.argv = ['gym', 'eval', 'run', '--help']\n"
        "from gymflow.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('gymflow.cli.analysis', 'gymflow.cli.data', 'polars')"
        " if m in sys.modules))"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "[]"
