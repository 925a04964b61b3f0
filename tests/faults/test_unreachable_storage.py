"""Object storage that does not answer (issue 42): `gym eval aggregate s3://…` with an
unreachable endpoint ended in botocore's EndpointConnectionError traceback, exit 3 ("a gymflow
bug"), because s3fs lets botocore's own errors through where it turns answers into OSError.
Now it is one error line naming the URL, exit 1, and nothing is written."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import gym
from tests.faults.stores import one_error_line


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_aggregate_from_an_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "AWS_ACCESS_KEY_ID": "gymflow-test",
        "AWS_SECRET_ACCESS_KEY": "gymflow-test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",  # botocore's retries would only make the test slower
    }
    out = tmp_path / "merged"
    done = gym("eval", "aggregate", "s3://bucket/run", "--out", str(out), cwd=tmp_path, env=env)
    line = one_error_line(done.stderr)
    assert done.returncode == 1, done.stderr
    assert "s3://bucket/run" in line and "Could not connect to the endpoint" in line, line
    assert not out.exists()
