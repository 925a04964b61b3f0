"""The house's habit (issue 43 item 7): a commit's subject is under 72 characters, its evidence
in the body. Checked over the history since the habit was first checked, so an older commit
(written before it) is not held to it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the first commit held to the habit is the one after this
SINCE = "1325753"
LIMIT = 72


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )


def test_commit_subjects_are_under_72_characters() -> None:
    if (
        shutil.which("git") is None
        or _git("rev-parse", "--verify", f"{SINCE}^{{commit}}").returncode
    ):
        pytest.skip(f"no git history holding {SINCE} here (an archive or a shallow clone)")
    log = _git("log", "--format=%h %s", f"{SINCE}..HEAD")
    assert log.returncode == 0, log.stderr
    long = [line for line in log.stdout.splitlines() if len(line.split(" ", 1)[1]) >= LIMIT]
    assert not long, f"subjects of {LIMIT} characters or more: {long}"
