"""Flow tests run through Prefect: one session-scoped test server for the flows this process runs,
and one deployed team setup (server, work pool, worker) for the tests that run deployments."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prefect.testing.utilities import prefect_test_harness

from tests.flows.deployed import Deployment, deployed


@pytest.fixture(scope="session")
def prefect_api(_isolated_prefect_home):
    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    """One deployed team setup (tests/flows/deployed.py) for the work-pool and UI tests."""
    with deployed(tmp_path_factory.mktemp("deployed")) as running:
        yield running
