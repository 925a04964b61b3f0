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

import fcntl
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
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
#: The users the owner's tests run as, made once per machine: one with subordinate ids (as
#: Debian's useradd gives every new user), one without (a system user gets none).
OWNER, OWNER_WITHOUT_SUBIDS = "gymflow-test-owner", "gymflow-test-nosubids"
SCENARIO = Path(__file__).with_name("non_root_owner.py")


def _test_user(name: str, subordinate: bool) -> tuple[int, int]:
    """A non-root user (uid, gid), made under a lock (xdist workers share the machine)."""
    if os.geteuid() != 0:
        pytest.skip("makes a non-root owner of its own: run as root (CI does)")
    for tool in ("useradd", "usermod", "setpriv", "unshare", "bwrap"):
        require_tool(tool)
    if subordinate:
        require_tool("newuidmap")  # the uidmap package, which .ci/run installs
    with open("/var/tmp/gymflow-test-users.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            extra = ["--create-home"] if subordinate else ["--system", "--no-create-home"]
            subprocess.run(["useradd", *extra, "--shell", "/bin/sh", name], check=True)
            user = pwd.getpwnam(name)
        listed = (
            [line.split(":")[0] for line in Path("/etc/subuid").read_text().splitlines() if line]
            if Path("/etc/subuid").exists()
            else []
        )
        if subordinate and name not in listed:
            first = _free_subordinate_id()
            ids = f"{first}-{first + 65535}"
            subprocess.run(
                ["usermod", "--add-subuids", ids, "--add-subgids", ids, name], check=True
            )
    return user.pw_uid, user.pw_gid


def _free_subordinate_id() -> int:
    ends = [100_000]
    for path in (Path("/etc/subuid"), Path("/etc/subgid")):
        for line in path.read_text().splitlines() if path.exists() else []:
            _, first, count = line.split(":")
            ends.append(int(first) + int(count))
    return max(ends)


def _reachable(paths: list[Path], stage: Path) -> list[str]:
    """A command (as root) that runs what follows it in a mount namespace of its own where
    another user reaches `paths`: a folder no other user may search on the way (root's 0700 home,
    where pyenv puts this interpreter and CI may clone the project) is replaced by an empty one
    with only `paths` bound back, through `stage`, an empty folder. Not bubblewrap: it sets
    no_new_privs, under which the setuid newuidmap maps nothing."""
    closed: set[Path] = set()
    wanted: set[Path] = set()
    for path in paths:
        above = [a for a in reversed(path.parents) if a != Path("/") and not a.stat().st_mode & 1]
        if above:
            closed.add(above[0])
            wanted.add(path)
    lines = ["set -e"]
    for folder in sorted(closed):
        staged = shlex.quote(f"{stage}{folder}")
        lines += [f"mkdir -p {staged}", f"mount --rbind {shlex.quote(str(folder))} {staged}"]
    for folder in sorted(closed):
        lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(folder))}")
    for path in sorted(wanted):
        quoted, staged = shlex.quote(str(path)), shlex.quote(f"{stage}{path}")
        lines += [f"mkdir -p {quoted}", f"mount --rbind {staged} {quoted}"]
    script = "\n".join([*lines, 'exec "$@"'])
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"]


def _as_owner(uid: int, gid: int, work: Path, secret: str) -> tuple[dict, str]:
    """non_root_owner.py run as `uid` with this interpreter and this gymflow; its findings and
    its stderr."""
    work.mkdir(mode=0o700)
    os.chown(work, uid, gid)
    needed = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parents[1]}
    needed |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    needed.add(SCENARIO.parent)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work / "home"),
        "XDG_CONFIG_HOME": str(work / "config"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "LANG": "C.UTF-8",
    }
    stage = work.parent / "stage"
    stage.mkdir(mode=0o700)
    argv = _reachable(sorted(needed), stage)
    argv += [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={gid}"]
    argv += ["--clear-groups", "--", sys.executable, str(SCENARIO), str(work), secret]
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd="/")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout.splitlines()[-1]), ran.stderr


def test_a_non_root_owners_sandbox_runs_as_a_user_of_its_own(host_folder: Path) -> None:
    """The owner is not root: its sandboxes run as a subordinate id in a user namespace of its
    own. A task's test.sh and a code candidate cannot read the owner's 0600 file in a folder the
    sandbox shows (before: the owner's id, so they did), nor the seal key (not there), nor kill
    the owner's process (not in their PID namespace); the owner still copies out and removes
    what the command left, a 0600 file and a folder of mode 000 included."""
    uid, gid = _test_user(OWNER, subordinate=True)
    secret = "OWNER-TOKEN-" + os.urandom(4).hex()
    seen, stderr = _as_owner(uid, gid, host_folder / "owner", secret)
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
    assert "run as your own user id" not in stderr, stderr


def test_without_subordinate_ids_the_owners_id_is_kept_and_said(host_folder: Path) -> None:
    """No subordinate ids for the owner: the commands keep its id (the allow-list root still
    keeps the key out, and the PID namespace its processes), and gymflow says so once."""
    uid, gid = _test_user(OWNER_WITHOUT_SUBIDS, subordinate=False)
    secret = "OWNER-TOKEN-" + os.urandom(4).hex()
    seen, stderr = _as_owner(uid, gid, host_folder / "owner", secret)
    output = seen["workspace"]["output"]
    assert f"uid {uid}\n" in output, output
    assert "/gymflow/seal.key: No such file or directory" in output, output
    assert "No such process" in output and seen["victim_alive"], seen
    assert secret in output  # what it owns among the shown folders: the stated limit
    assert stderr.count("warning: sandboxed commands run as your own user id") == 1, stderr
    assert "gives this user no range" in stderr, stderr
