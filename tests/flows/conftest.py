"""Flow tests run through Prefect: one session-scoped test server for the folder."""

from __future__ import annotations

import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session")
def prefect_api(_isolated_prefect_home):
    with prefect_test_harness(server_startup_timeout=90):
        yield
