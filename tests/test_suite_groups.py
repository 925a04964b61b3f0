"""The test command's groups hold: under `--dist loadgroup` every test of a group runs on one
worker, so a session fixture a group shares (a model server, a deployment, a real run) is built
once. Until tests/conftest.py's hook ran first, xdist's worker read the marks before they were
added and handed each test out alone: both workers started their own llama.cpp servers and
deployments, and each real-model plan ran once per worker that needed it."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

#: Two files of the `reports` group (tests/conftest.py's `xdist_group`), quick ones.
FILES = ("tests/reports/test_svg.py", "tests/reports/test_bytecode_cache.py")


def test_a_groups_tests_run_on_one_worker() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", *FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    passed = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", ran.stdout, re.MULTILINE)
    assert len(passed) >= 4, ran.stdout
    assert all(node.endswith("@reports") for _, node in passed), passed
    assert len({worker for worker, _ in passed}) == 1, passed
