"""`gym_in_process` (tests/conftest.py), which the fast tier's reads of stored runs use, says
what the `gym` process says: the same exit code, standard output and error, for a command that
prints a table, one that prints JSON, and two that refuse their input (an unknown verifier
version, a folder holding no store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.builder import StoreBuilder
from tests.conftest import gym, gym_in_process


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("in-process")
    b = StoreBuilder()
    for i, answer in enumerate((7, 12, 30)):
        b.task(f"t{i}", answer)
        b.fill(f"t{i}", "10")
    b.write(where / "run")
    # the first health records the seals as checked (store/checked_stores.py): both runs below
    # then print the same "unchanged since" line
    gym_in_process("eval", "health", "run", cwd=where)
    return where


@pytest.mark.parametrize(
    "args",
    [
        ("eval", "health", "run"),
        ("eval", "health", "run", "--json", "--max-share", "0", "--warning-max-share", "0"),
        ("eval", "profile", "run", "--verifier-version", "nope"),
        ("eval", "health", "no-such-run"),
    ],
    ids=["table", "json-gate", "unknown-version", "no-store"],
)
def test_in_process_says_what_the_process_says(folder: Path, args: tuple[str, ...]) -> None:
    process = gym(*args, cwd=folder)
    assert process.stdout + process.stderr, "the command printed nothing to compare"
    inline = gym_in_process(*args, cwd=folder)
    assert (inline.returncode, inline.stdout, inline.stderr) == (
        process.returncode,
        process.stdout,
        process.stderr,
    )


def test_in_process_lays_out_at_the_width_columns_names(folder: Path) -> None:
    """COLUMNS=80 (tests/faults/test_attacks_terminal.py's width) lays health's table out as
    the process does, not at the helper's default of 200."""
    narrow = {"COLUMNS": "80"}
    process = gym("eval", "health", "run", cwd=folder, env=narrow)
    assert process.stdout != gym("eval", "health", "run", cwd=folder).stdout  # width matters
    inline = gym_in_process("eval", "health", "run", cwd=folder, env=narrow)
    assert (inline.returncode, inline.stdout, inline.stderr) == (
        process.returncode,
        process.stdout,
        process.stderr,
    )
