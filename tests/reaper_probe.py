"""Not part of the suite (its name is not test_*.py): tests/test_reaper.py runs it as a pytest
run of its own, which it then kills. Each test starts servers the ways the suite's fixtures and
commands do, records what it started in $GYMFLOW_PROBE_DIR, and waits to be killed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROBE_DIR = Path(os.environ.get("GYMFLOW_PROBE_DIR", "."))
SLEEP = ["sleep", "3600"]


def ready(name: str, pids: list[int]) -> None:
    (PROBE_DIR / f"{name}.pids").write_text(" ".join(map(str, pids)))


def test_servers_of_every_kind() -> None:
    plain = subprocess.Popen(SLEEP)
    # a server in a session of its own, as tests/conftest.py's Prefect server is started
    own_session = subprocess.Popen(SLEEP, start_new_session=True)
    # an environment of its own: only its parent ties it to the run
    clean_env = subprocess.Popen(SLEEP, env={"PATH": os.environ["PATH"]})
    # an orphan: started by a process that has already exited, as a daemonising server is
    spawn = (
        "import subprocess; print(subprocess.Popen(['sleep', '3600'], start_new_session=True, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
    )
    orphan = int(subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True,
                                check=True).stdout)  # fmt: skip
    ready("kinds", [plain.pid, own_session.pid, clean_env.pid, orphan])
    time.sleep(3600)


@pytest.mark.skipif(not os.environ.get("GYMFLOW_PROBE_PREFECT"), reason="the Prefect variant")
def test_prefect_server(prefect_api: str) -> None:
    ready("prefect", [])
    time.sleep(3600)
