"""A benchmark file named like another on the search path (a user's edited copy of a shipped
benchmark) is refused naming both files, never silently replaced by the other."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gymflow.environments.registry import BUILTIN_DIR

SHIPPED = BUILTIN_DIR / "benchmarks"


def _refused(tmp_path: Path, *args: str) -> str:
    """`gym ARGS` in `tmp_path` with it on the search path: exit 1, one message, nothing run."""
    result = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", *args],
        cwd=tmp_path,
        env={
            **os.environ,
            "PREFECT_HOME": str(tmp_path / "prefect"),
            "GYMFLOW_ENVIRONMENTS_PATH": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "Traceback" not in out
    assert not (tmp_path / "runs").exists()
    return out


def test_validating_an_edited_copy_of_a_shipped_benchmark_names_both_files(tmp_path: Path):
    (tmp_path / "benchmarks").mkdir()
    copy = tmp_path / "benchmarks" / "word-problems.yaml"
    copy.write_text(
        (SHIPPED / "word-problems.yaml").read_text().replace("repeats:", "repeats: 3 #")
    )
    (tmp_path / "benchmarks" / "word-problems.jsonl").write_bytes(
        (SHIPPED / "word-problems.jsonl").read_bytes()
    )
    for args in (
        ["env", "validate", "benchmarks/word-problems.yaml"],
        ["eval", "run", "--benchmark", "word-problems", "--out", "runs/x"],
    ):
        out = _refused(tmp_path, *args)
        assert "defined twice" in out and "word-problems.yaml" in out, out


def test_running_a_copy_of_a_shipped_environment_names_both_folders(tmp_path: Path):
    shutil.copytree(
        BUILTIN_DIR / "arithmetic", tmp_path / "mine", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = _refused(tmp_path, "eval", "run", "--environment", "arithmetic", "--out", "runs/x")
    assert "environment 'arithmetic' is defined twice" in out and "mine" in out, out
