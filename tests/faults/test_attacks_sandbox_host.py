"""What a workspace sandbox shows of the host (attack pass 7, s11 and s12).

The bubblewrap sandbox bound every top-level host folder read-only, and without root ran commands
as the caller: a task folder's tests/test.sh (`cat ~/.config/gymflow/seal.key`) put the owner's
seal key into the stored verdict, and the agent (the policy, an adversary here) read another copy
of its own task's solution/solve.sh and listed other runs' folders. Read-only was the whole leak.
The sandbox's root is now an allow-list (the system's programs, /etc without its secrets, the
agent's install prefix): the home folder, the XDG folders with the key, the host's /tmp and every
other copy of the tasks are not there at all, whoever the command runs as. Run as root (the
sandbox has a user id of its own) and as a non-root owner runs it (the commands keep the
caller's user id: `sandbox_user` made to keep it, as where the host gives no subordinate ids)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import orjson
import pytest

from tests.conftest import gym, require_tool
from tests.owner import (
    OWNER,
    OWNER_WITHOUT_SUBIDS,
    as_owner,
    non_root_user,
    owner_env,
    owner_folder,
)

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"

#: What the task's test and the agent try to read; every path is a host path the test made.
PROBE = """echo "probe uid: $(id -u)"
for path in {paths}; do echo "probe $path: $(cat "$path" 2>&1 | head -c 300)"; done
echo "probe home: $(ls -a {home} 2>&1)"
"""

#: Forces the branch of a non-root owner without subordinate ids in the `gym` process: the
#: sandbox keeps the caller's user id.
AS_CALLER = """import gymflow.sandboxes.bubblewrap as bubblewrap
from gymflow.verifiers.sandbox_host import SandboxUser

bubblewrap.sandbox_user = lambda uid: SandboxUser(None)
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


# -- a non-root owner --------------------------------------------------------------------------
SCENARIO = Path(__file__).with_name("non_root_owner.py")


def _as_owner(uid: int, gid: int, folder: Path, secret: str) -> tuple[dict, str]:
    """non_root_owner.py run as `uid` with this interpreter and this gymflow; its findings and
    its stderr."""
    work = owner_folder(folder / "owner", uid, gid)
    argv = [*as_owner(uid, gid, folder / "stage"), sys.executable, str(SCENARIO), str(work), secret]
    env = owner_env(work)
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd="/")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout.splitlines()[-1]), ran.stderr


def test_a_non_root_owners_sandbox_runs_as_a_user_of_its_own(host_folder: Path) -> None:
    """The owner is not root: its sandboxes run as a subordinate id in a user namespace of its
    own. A task's test.sh and a code candidate cannot read the owner's 0600 file in a folder the
    sandbox shows (before: the owner's id, so they did), nor the seal key (not there), nor kill
    the owner's process (not in their PID namespace); the owner still copies out and removes
    what the command left, a 0600 file and a folder of mode 000 included."""
    uid, gid = non_root_user(OWNER, subordinate=True)
    secret = "OWNER-TOKEN-" + os.urandom(4).hex()
    seen, stderr = _as_owner(uid, gid, host_folder, secret)
    workspace, code = seen["workspace"], seen["code"]
    output = workspace["output"]
    assert seen["owner_uid"] == uid
    assert secret not in output and secret not in str(code), seen
    assert f"uid {uid}\n" not in output and "uid " in output, output
    assert "/agent/token: Permission denied" in output, output
    assert "/gymflow/seal.key: No such file or directory" in output, output
    assert "No such process" in output and "kill 1" in output, output
    assert code[0] != uid and code[1:] == ["errno 13", "errno 3"], code
    assert seen["victim_alive"], seen
    assert workspace.get("copied") == "private\n" and workspace["reset"] == "done", workspace
    assert workspace["scratch_left"] is False, workspace
    assert seen["orphan_removed"] is True, seen  # what a killed owner left as a subordinate id
    assert "run as your own user id" not in stderr, stderr


def test_without_subordinate_ids_the_owners_id_is_kept_and_said(host_folder: Path) -> None:
    """No subordinate ids for the owner: the commands keep its id (the allow-list root still
    keeps the key out, and the PID namespace its processes), and gymflow says so once."""
    uid, gid = non_root_user(OWNER_WITHOUT_SUBIDS, subordinate=False)
    secret = "OWNER-TOKEN-" + os.urandom(4).hex()
    seen, stderr = _as_owner(uid, gid, host_folder, secret)
    output = seen["workspace"]["output"]
    assert f"uid {uid}\n" in output, output
    assert "/gymflow/seal.key: No such file or directory" in output, output
    assert "No such process" in output and seen["victim_alive"], seen
    assert secret in output  # what it owns among the shown folders: the stated limit
    workspace = seen["workspace"]
    assert workspace["reset"] == "done" and workspace["scratch_left"] is False, workspace
    assert stderr.count("warning: sandboxed commands run as your own user id") == 1, stderr
    assert "gives this user no range" in stderr, stderr
