"""Shared fixtures. Tests that need Prefect live in tests/flows (one session-scoped harness)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The console script pip installed beside this interpreter: exactly what a user runs.
GYM = str(Path(sys.executable).parent / "gym")


def gym(
    *args: str,
    cwd: Path,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the `gym` CLI as a user would: a subprocess, its output captured."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    result = subprocess.run(
        [GYM, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"gym {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def require_tool(name: str) -> str:
    """A system tool the test needs: skipped locally when absent, a failure in CI."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} is not installed")
    return path


@pytest.fixture(autouse=True, scope="session")
def _isolated_prefect_home(tmp_path_factory: pytest.TempPathFactory):
    """Never write into a real ~/.prefect, and keep Prefect quiet and offline."""
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ["PREFECT_HOME"] = str(home)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # A fresh PREFECT_HOME runs migrations; on a loaded 2-core machine that can outlast the
    # default 20 s the ephemeral API server is given to start.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    yield
