"""The exit codes `gymflow.cli.exit_codes` defines are the ones the docs' table lists
(docs/reference/exit-codes.md), and a usage
error exits 1 (bad usage, like any bad input), not click's 2, which would read as a failed
gate; no error prints a traceback."""

from __future__ import annotations

import re
from pathlib import Path

from gymflow.cli import exit_codes
from tests.conftest import ROOT, gym
from tests.faults.stores import one_error_line


def test_the_docs_list_every_exit_code():
    page = ROOT.joinpath("docs", "reference", "exit-codes.md").read_text()
    table = page.split("| exit code |", 1)[1]
    documented = set()
    for first, second in re.findall(r"^\| (\d+)(?: / (\d+))? \|", table, re.M):
        documented |= {int(first), *([int(second)] if second else [])}
    defined = {
        exit_codes.OK,
        exit_codes.BAD_INPUT,
        exit_codes.GATE_FAILED,
        exit_codes.RUNTIME,
        exit_codes.INTERRUPTED,
        exit_codes.TERMINATED,
    }
    assert documented == defined == {0, 1, 2, 3, 130, 143}


def test_usage_and_input_errors_exit_1_without_a_traceback(tmp_path: Path):
    usage = gym("eval", "run", "--no-such-flag", cwd=tmp_path)
    assert usage.returncode == exit_codes.BAD_INPUT
    assert "Traceback" not in usage.stderr and "No such option" in usage.stderr
    missing = gym("eval", "profile", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == exit_codes.BAD_INPUT
    assert "no gymflow store here" in one_error_line(missing.stderr)


def test_help_that_names_a_gates_exit_code_names_the_one_it_returns():
    """`exit N when ...` / `exit N on ...` in a command's help (its summary in the command table
    or its docstring) describes a gate, and a failed gate exits GATE_FAILED: `gym eval health`'s
    help said 1 while it exited 2."""
    cli = ROOT / "src" / "gymflow" / "cli"
    claims = [
        (path.name, int(code))
        for path in sorted(cli.glob("*.py"))
        for code in re.findall(r"\bexit (\d+) (?:when|on)\b", path.read_text())
    ]
    assert claims, "the gates' help names their exit code"
    assert [c for c in claims if c[1] != exit_codes.GATE_FAILED] == []
