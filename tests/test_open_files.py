"""A run's open-file headroom and its in-flight bound are set before anything starts."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gymflow.core.config import ConfigError, parse_config
from gymflow.models.open_files import RESERVE, SERVING_OPEN_FILES
from tests.conftest import GYM, free_port


def _limited(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_soft_limit_is_raised_to_what_the_concurrency_needs():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024 + RESERVE:
        pytest.skip(f"hard open-file limit {hard} is below what this test needs")
    code = (
        "import resource; from gymflow.models.open_files import ensure_open_files;"
        "ensure_open_files(1024); print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=_limited(300, hard),
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == 1024 + RESERVE


def test_a_hard_limit_too_low_refuses_the_run_before_it_starts(tmp_path):
    result = subprocess.run(
        [
            GYM,
            "eval",
            "run",
            "--benchmark",
            "arithmetic-smoke",
            "--concurrency",
            "1024",
            "--out",
            str(tmp_path / "run"),
        ],
        preexec_fn=_limited(400, 400),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "needs about 1280 open files" in result.stderr
    assert "ulimit -Hn" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "gymflow.duckdb").exists()


@pytest.mark.parametrize(
    ("hard", "remote", "remedy"),
    [
        (400, False, "lower concurrency to 144 or raise the hard limit"),
        (400, True, "lower concurrency to 72 or raise the hard limit"),
        # the reserve alone is over the limit: no concurrency fits, so none is offered
        (64, False, "raise the hard limit to at least 257"),
        (64, True, "raise the hard limit to at least 258"),
    ],
)
def test_a_refusal_offers_a_remedy_that_fits_the_hard_limit(hard, remote, remedy):
    code = (
        "from gymflow.models.open_files import ensure_open_files\n"
        f"try:\n    ensure_open_files(1024, remote_resources={remote})\n"
        "except Exception as exc:\n    print(exc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=_limited(hard, hard), capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip().endswith(f"(hard limit, `ulimit -Hn`): {remedy}")


def test_the_default_batch_grows_to_sixteen_waves_of_the_concurrency():
    assert parse_config({"benchmark": "arithmetic-smoke"}, "test").batch_size == 2000
    config = parse_config({"benchmark": "arithmetic-smoke", "concurrency": 1024}, "test")
    assert config.batch_size == 16 * 1024
    chosen = {"benchmark": "arithmetic-smoke", "concurrency": 1024, "batch_size": 1024}
    assert parse_config(chosen, "test").batch_size == 1024


def test_a_chosen_batch_below_the_concurrency_is_refused():
    with pytest.raises(ConfigError, match="batch_size 100 is below concurrency 200"):
        parse_config(
            {"benchmark": "arithmetic-smoke", "concurrency": 200, "batch_size": 100}, "test"
        )


def _soft_open_files(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")


@pytest.mark.parametrize("command", [["model"], ["environment", "arithmetic"]])
def test_a_served_model_or_environment_raises_its_own_open_file_limit(command):
    """A server started from a shell with a soft limit of 1,024 refused the last connections of
    a run at concurrency 1,024 (bench/latency_bound.py: 0.61 of the bound, 638 calls retried):
    it raises its own limit, however many clients come."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    wanted = SERVING_OPEN_FILES if hard == resource.RLIM_INFINITY else min(SERVING_OPEN_FILES, hard)
    if wanted <= 300:
        pytest.skip(f"hard open-file limit {hard} leaves nothing to raise")
    port = free_port()
    server = subprocess.Popen(
        [GYM, "serve", *command, "--port", str(port)],
        preexec_fn=_limited(300, hard),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        assert _soft_open_files(server.pid) == wanted
    finally:
        server.terminate()
        server.wait(30)
