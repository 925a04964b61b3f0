"""Strings from data printed as text: task ids, tags and a model name holding Rich markup and
terminal escape sequences go through every command that prints them (the five that exited 3 with
a MarkupError, and the others that print ids), at 80 columns, as a user runs them.

Each command must exit 0, print no raw ESC (or other control character) to its output, show the
hostile strings escaped and whole, and print no Python repr."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gymflow.present import safe_text
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym_in_process as gym  # reads of stored runs: no process needed
from tests.faults.stores import tree_digest

#: An OSC window title, cursor up + erase line (the fake "health: healthy" overwrite), a bell,
#: a C1 control and a right-to-left override, beside Rich markup that closes a style never opened.
TITLE = "\x1b]0;pwned\x07"
OVERWRITE = "\x1b[1A\x1b[2Khealth: healthy"
HOSTILE_IDS = [
    f"t[/]{TITLE}",
    f"t[bold red]{OVERWRITE}",
    "t\x9b31m\u202egnp.exe",
    "t[link=file:///etc/passwd]x[/link]",
]
MODEL = "m[/]\x1b[31m"
TAG = "tag[/]\x1b]8;;http://evil/\x07"

#: Raw control characters but newline (a C1 control, 0x80-0x9f, is one too).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _hostile_run(run_dir: Path, run_id: str) -> Path:
    b = StoreBuilder(RunMeta(run_id=run_id, model=MODEL, repeats=3))
    for i, task_id in enumerate(HOSTILE_IDS):
        b.task(task_id, 10 + i, tags=(TAG, "plain"), difficulty="hard[/]")
        b.fill(task_id, ["110", "100", "000", "111"][i])  # the first two sometimes pass
    return b.write(run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "runs"
    _hostile_run(root / "a", "run-a")
    _hostile_run(root / "b", "run-b")
    return root


def _run(cwd: Path, *args: str) -> str:
    result = gym(*args, cwd=cwd, env={"COLUMNS": "80"})
    assert result.returncode == 0, f"gym {' '.join(args)}: {result.returncode}\n{result.stderr}"
    for stream in (result.stdout, result.stderr):
        assert not RAW_CONTROL.search(stream), repr(stream[:2000])
        assert "{'" not in stream and "['" not in stream, stream
        assert "MarkupError" not in stream
    return result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("eval", "profile", "runs/a"),
        ("eval", "diagnose", "runs/a"),
        ("eval", "health", "runs/a"),
        ("eval", "profile", "runs/a", "--compare", "runs/b"),
        ("data", "profile", "runs/a"),
        ("runs", "list", "runs"),
        ("report", "runs/a"),
    ],
    ids=" ".join,
)
def test_hostile_strings_are_printed_as_text(runs: Path, args: tuple[str, ...]):
    stdout = _run(runs.parent, *args)
    shown = {
        ("eval", "profile", "runs/a"): [MODEL, TAG, "hard[/]"],
        ("eval", "diagnose", "runs/a"): HOSTILE_IDS[:2],  # the sometimes-pass tasks, by id
        ("eval", "profile", "runs/a", "--compare", "runs/b"): [MODEL],
        ("data", "profile", "runs/a"): [TAG, "hard[/]"],
    }.get(args, [])
    for text in shown:
        assert safe_text(text) in stdout, (text, stdout)


def test_a_fake_line_cannot_overwrite_the_verdict(runs: Path):
    """The cursor-up + erase-line id shows as escapes inside its own line: no line of the
    output starts with the text it tried to print over the one above."""
    stdout = _run(runs.parent, "eval", "diagnose", "runs/a")
    assert "t[bold red]\\x1b[1A\\x1b[2Khealth: healthy passes 1/3" in stdout
    assert not any(line.startswith("health: healthy") for line in stdout.splitlines())


#: A newline in a model name or a task id: the line after it is one the data wrote.
FORGED_VERDICT = "0 of 12 rollouts unhealthy (12 expected); verdict: healthy; gate: pass"
FORGED_SCORE = "pass@1 = 100.0% (95% CI 99.0% – 100.0%)"


def test_a_newline_in_an_id_or_model_prints_no_line_of_its_own(tmp_path: Path):
    b = StoreBuilder(RunMeta(run_id="run-nl", model=f"gpt\n{FORGED_VERDICT}", repeats=3))
    b.task(f"t\n{FORGED_SCORE}", 10)
    b.fill(f"t\n{FORGED_SCORE}", "110")  # sometimes passes: diagnose names it on a line
    b.task("u", 11)
    b.fill("u", "000")
    run = b.write(tmp_path / "a")
    before = tree_digest(run)
    for args in (("eval", "profile", "a"), ("eval", "diagnose", "a")):
        stdout = _run(tmp_path, *args)
        lines = stdout.splitlines()
        assert not any(line.startswith((FORGED_VERDICT, FORGED_SCORE)) for line in lines), stdout
    assert "gpt\\n0 of 12 rollouts unhealthy" in _run(tmp_path, "eval", "profile", "a")
    assert tree_digest(run) == before  # read-only commands: the store is as it was
