"""What a workspace sandbox shows of the host (attack pass 7, s11 and s12).

The bubblewrap sandbox bound every top-level host folder read-only, and without root ran commands
as the caller: a task folder's tests/test.sh (`cat ~/.config/gymflow/seal.key`) put the owner's
seal key into the stored verdict, and the agent (the policy, an adversary here) read another copy
of its own task's solution/solve.sh and listed other runs' folders. Read-only was the whole leak.
The sandbox's root is now an allow-list (the system's programs, /etc without its secrets, the
agent's install prefix): the home folder, the XDG folders with the key, the host's /tmp and every
other copy of the tasks are not there at all, whoever the command runs as. Run as root (the
sandbox has a user id of its own) and as a non-root owner runs it (the commands keep the
caller's user id: `_take_uid` made to return None, as the attacker's sitecustomize did)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import orjson
import pytest

from tests.conftest import gym, require_tool

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"

#: What the task's test and the agent try to read; every path is a host path the test made.
PROBE = """echo "probe uid: $(id -u)"
for path in {paths}; do echo "probe $path: $(cat "$path" 2>&1 | head -c 300)"; done
echo "probe home: $(ls -a {home} 2>&1)"
"""

#: Forces the non-root branch in the `gym` process: the sandbox keeps the caller's user id.
AS_CALLER = """import gymflow.sandboxes.bubblewrap as bubblewrap


async def _caller():
    return None


bubblewrap._take_uid = _caller
"""


@pytest.mark.parametrize("as_caller", [False, True], ids=["own-uid", "caller-uid"])
def test_neither_the_test_nor_the_agent_sees_the_owners_files(
    tmp_path: Path, host_folder: Path, prefect_api: str, as_caller: bool
) -> None:
    require_tool("bwrap")
    home, config = host_folder / "home", host_folder / "xdg-config"
    aws = home / ".aws" / "credentials"
    aws.parent.mkdir(parents=True)
    aws.write_text("aws_secret_access_key = AWS-SECRET-7c1e\n")
    # another copy of the same task elsewhere on the host, world-readable as checkouts are
    elsewhere = host_folder / "elsewhere" / "fix-median"
    shutil.copytree(SHIPPED / "fix-median", elsewhere)
    (elsewhere / "solution" / "solve.sh").write_text("echo ANSWER-KEY-3f9a\n")
    key = config / "gymflow" / "seal.key"
    paths = " ".join(str(p) for p in (key, aws, elsewhere / "solution" / "solve.sh"))
    probe = PROBE.format(paths=paths, home=home)

    data = tmp_path / "data"
    shutil.copytree(SHIPPED / "fix-median", data / "tasks" / "fix-median")
    test_sh = data / "tasks" / "fix-median" / "tests" / "test.sh"
    test_sh.write_text(
        f"#!/bin/bash\n{probe}mkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
    )
    (data / "benchmarks").mkdir()
    (data / "benchmarks" / "one.yaml").write_text("name: one\nworkspace: ../tasks\n")
    config_file = {
        "benchmark": "one",
        "repeats": 1,
        "out": "runs/probe",
        "harness": {"name": "command", "command": probe, "agent_version": "probe 1"},
    }
    (tmp_path / "eval.yaml").write_bytes(orjson.dumps(config_file))
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(config),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "GYMFLOW_BENCHMARKS_PATH": str(data),
        "PREFECT_API_URL": prefect_api,
    }
    if as_caller:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(AS_CALLER)
        env["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, env=env, timeout=600)
    store = tmp_path / "runs" / "probe" / "gymflow.duckdb"
    assert store.exists(), ran.stdout + ran.stderr
    with duckdb.connect(str(store), read_only=True) as con:
        (agent_output,) = con.execute("SELECT output_text FROM rollouts").fetchone()
        (details,) = con.execute("SELECT details_json FROM verifications").fetchone()
    test_output = orjson.loads(details)["test_output"]

    secrets = [key.read_text().strip(), "AWS-SECRET-7c1e", "ANSWER-KEY-3f9a"]
    uid = "0" if as_caller and os.geteuid() == 0 else None
    for output in (agent_output, test_output):
        assert "probe uid:" in output, output  # it ran, and reported what it saw
        if uid is not None:
            assert f"probe uid: {uid}\n" in output, output  # the caller's own user id
        for path in paths.split():
            assert f"probe {path}: cat: {path}: No such file or directory" in output, output
        assert f"probe home: ls: cannot access '{home}': No such file" in output, output
        assert not any(secret in output for secret in secrets), output
