"""`gym` imports only the module of the command it runs (`gymflow.cli.COMMANDS`): the table must
name, for every command, the module that registers it, and a line that names no command lists
them all from the table's summaries without importing any command module."""

from __future__ import annotations

import subprocess
import sys

import gymflow.cli as cli
from gymflow.cli import exit_codes
from gymflow.cli.app import app
from tests.conftest import gym


def _registered() -> dict[tuple[str, ...], str]:
    """Every command's words (group, name) and the module whose import registered it."""
    for module in {module for module, _ in cli.COMMANDS.values()}:
        __import__(f"gymflow.cli.{module}")
    found = {(command.name,): command.callback.__module__ for command in app.registered_commands}
    for group in app.registered_groups:
        for command in group.typer_instance.registered_commands:
            found[(group.name, command.name)] = command.callback.__module__
    return {words: module.rpartition(".")[2] for words, module in found.items()}


def test_the_table_names_every_command_and_the_module_that_registers_it() -> None:
    registered = _registered()
    assert registered == {words: module for words, (module, _) in cli.COMMANDS.items()}
    assert {group.name for group in app.registered_groups} == set(cli.GROUPS)
    for words in registered:
        assert cli.command_module([*words, "--help"]) == registered[words], words


def _imported_by(argv: list[str]) -> list[str]:
    """The command modules and heavy libraries a `gym` command line imported."""
    probe = (
        f"import sys; sys.argv = ['gym', *{argv!r}]\n"
        "from gymflow.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('duckdb', 'polars', 'numpy', 'prefect', 'gymflow.flows')\n"
        "print(sorted(m for m in sys.modules if m.startswith('gymflow.cli.') and m not in "
        "('gymflow.cli.app', 'gymflow.cli.commands', 'gymflow.cli.ending', "
        "'gymflow.cli.exit_codes', 'gymflow.cli.imports', "
        "'gymflow.cli.local_prefect') "
        "or m in heavy))"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    return eval(ran.stdout.strip().splitlines()[-1])


def test_listing_commands_imports_none_of_them() -> None:
    for argv in ([], ["--help"], ["eval", "--help"], ["data"], ["evl", "run"]):
        assert _imported_by(argv) == [], argv


def test_a_command_imports_its_own_module_only() -> None:
    """`gym eval run --help` loads its own module, not the CLI's polars-backed analysis ones."""
    imported = _imported_by(["eval", "run", "--help"])
    assert "gymflow.cli.evaluate" in imported
    assert not {"gymflow.cli.analysis", "gymflow.cli.data", "polars", "prefect"} & set(imported)


def test_help_lists_every_command_by_its_summary(tmp_path) -> None:
    top = gym("--help", cwd=tmp_path, check=True).stdout
    for words, (_, summary) in cli.COMMANDS.items():
        if len(words) == 1:
            assert words[0] in top and summary in top, words
    for name, text in cli.GROUPS.items():
        assert text in top, name
        listed = gym(name, "--help", cwd=tmp_path, check=True).stdout
        for words, (_, summary) in cli.COMMANDS.items():
            if words[0] == name:
                assert words[1] in listed and summary in listed, words
    typo = gym("evl", "run", cwd=tmp_path)
    assert typo.returncode == cli.exit_codes.BAD_INPUT
    assert "No such command 'evl'" in typo.stderr


def test_the_command_ends_without_the_teardown_but_as_python_would() -> None:
    """The `gym` process (here `python -m gymflow.cli`, as runpy runs it) skips the teardown of
    every module (gymflow.cli.ending): an object that prints from its finaliser at teardown
    prints nothing. What its exit shows is kept: an atexit callback runs, its buffered output
    reaches the pipe, and the exit code is the command's."""
    probe = (
        "import atexit, runpy, sys\n"
        "class Torn:\n"
        "    def __del__(self):\n"
        "        sys.stdout.write('torn down\\n')\n"
        "kept = Torn()\n"
        "atexit.register(lambda: sys.stdout.write('atexit ran\\n'))\n"
        "sys.argv = ['gym', 'no-such-command']\n"
        "runpy.run_module('gymflow.cli', run_name='__main__', alter_sys=True)\n"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ran.returncode == exit_codes.BAD_INPUT, ran.stderr
    assert ran.stdout.splitlines()[-1:] == ["atexit ran"], ran.stdout
    assert "torn down" not in ran.stdout
    # a program that calls main itself gets SystemExit and Python's own exit, teardown included
    called = probe.replace(
        "runpy.run_module('gymflow.cli', run_name='__main__', alter_sys=True)",
        "from gymflow.cli import main\nmain()",
    )
    ran = subprocess.run([sys.executable, "-c", called], capture_output=True, text=True)
    assert ran.returncode == exit_codes.BAD_INPUT, ran.stderr
    assert "torn down" in ran.stdout and "atexit ran" in ran.stdout, ran.stdout


def test_the_command_imports_with_no_full_collection_and_collects_after() -> None:
    """The `gym` process imports its command's modules with the cyclic collector off, freezes
    them, and has it on again once they are in (gymflow.cli.imports); a program that calls
    `main` keeps its collector as it is."""
    probe = (
        "import atexit, gc, runpy, sys\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(info['generation']))\n"
        "atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count() > 0, 2 in seen))\n"
        "sys.argv = ['gym', 'eval', 'run', '--help']\n"
        "runpy.run_module('gymflow.cli', run_name='__main__', alter_sys=True)\n"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ran.returncode == exit_codes.OK, ran.stderr
    assert ran.stdout.splitlines()[-1] == "True True False", ran.stdout
    called = probe.replace(
        "runpy.run_module('gymflow.cli', run_name='__main__', alter_sys=True)",
        "from gymflow.cli import main\nmain()",
    )
    ran = subprocess.run([sys.executable, "-c", called], capture_output=True, text=True)
    assert ran.returncode == exit_codes.OK, ran.stderr
    assert ran.stdout.splitlines()[-1].startswith("True False"), ran.stdout


def test_the_click_command_is_built_again_once_a_command_is_registered(monkeypatch) -> None:
    """`main` reuses the click command Typer built (70 ms a build with every command module
    imported) until a command is registered: a process running many command lines finds each
    command its modules register."""
    _registered()
    first = cli._click_command(app, cli._command_counts(app))
    assert cli._click_command(app, cli._command_counts(app)) is first
    group = next(g.typer_instance for g in app.registered_groups if g.name == "eval")
    assert group is not None
    monkeypatch.setattr(group, "registered_commands", list(group.registered_commands))
    group.command("probe")(lambda: None)
    try:
        rebuilt = cli._click_command(app, cli._command_counts(app))
    finally:  # the probe's build is not left for a later command line of this process
        cli._click_command.cache_clear()
    assert rebuilt is not first
    assert "probe" in rebuilt.commands["eval"].commands
    assert "probe" not in first.commands["eval"].commands
