"""The `ledger` fixture environment (tests/harness/envs), found via GYMFLOW_ENVIRONMENTS_PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymflow.environments.base import Environment
from gymflow.environments.registry import load_environment

ENVS = Path(__file__).parent / "envs"


@pytest.fixture(scope="session")
def ledger() -> Environment:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(ENVS))
        return load_environment("ledger")
