"""`gymflow` is installed beside `gym` (NeMo Gym 0.4 also installs a `gym`), and both, like
`python -m gymflow.cli`, run the same command."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import ROOT

ENTRY_POINT = "gymflow.cli:main"


def test_gymflow_script_beside_gym() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gym"] == scripts["gymflow"] == ENTRY_POINT


def test_the_entry_point_and_module_run_the_command(tmp_path) -> None:
    module, _, function = ENTRY_POINT.partition(":")
    as_script = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.argv = ['gymflow', 'list', 'benchmarks', '--json']; "
            f"from {module} import {function}; {function}()",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert as_script.returncode == 0, as_script.stderr
    as_module = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", "list", "benchmarks", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert as_module.returncode == 0, as_module.stderr
    assert as_module.stdout == as_script.stdout
    assert '"name": "arithmetic-smoke"' in as_module.stdout
