"""A real non-root owner, for tests of what gymflow does when it does not run as root (CI runs as
root, so without this such a branch is only ever forced): users made once per machine, and the
command line that runs something as one with this interpreter and this gymflow."""

from __future__ import annotations

import fcntl
import os
import pwd
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool

#: One user with subordinate ids (as Debian's useradd gives every new user), one without (a
#: system user gets none).
OWNER, OWNER_WITHOUT_SUBIDS = "gymflow-test-owner", "gymflow-test-nosubids"


def non_root_user(name: str, subordinate: bool) -> tuple[int, int]:
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
        if subordinate and name not in _listed(Path("/etc/subuid")):
            first = _free_subordinate_id()
            ids = f"{first}-{first + 65535}"
            subprocess.run(
                ["usermod", "--add-subuids", ids, "--add-subgids", ids, name], check=True
            )
    return user.pw_uid, user.pw_gid


def _listed(path: Path) -> list[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split(":")[0] for line in lines if line]


def _free_subordinate_id() -> int:
    ends = [100_000]
    for path in (Path("/etc/subuid"), Path("/etc/subgid")):
        for line in path.read_text().splitlines() if path.exists() else []:
            _, first, count = line.split(":")
            ends.append(int(first) + int(count))
    return max(ends)


def owner_folder(path: Path, uid: int, gid: int) -> Path:
    """`path` made, the owner's alone."""
    path.mkdir(mode=0o700)
    os.chown(path, uid, gid)
    return path


def owner_env(work: Path, **extra: str) -> dict[str, str]:
    """This process's environment with the owner's own home, XDG and Prefect folders in `work`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "PREFECT_", "TMP"))}
    env |= {"HOME": str(work / "home"), "XDG_CONFIG_HOME": str(work / "config")}
    env |= {"XDG_DATA_HOME": str(work / "data"), "XDG_CACHE_HOME": str(work / "cache")}
    return env | {"PREFECT_HOME": str(work / "prefect"), **extra}


def as_owner(uid: int, gid: int, stage: Path) -> list[str]:
    """The start of a command line (run as root) that runs what follows as `uid`, in a mount
    namespace of its own where it reaches this interpreter, its packages and this project: a
    folder no other user may search on the way (root's 0700 home, where pyenv puts the
    interpreter and CI may clone the project) is replaced by an empty one with only those bound
    back, through `stage` (made here, empty). Not bubblewrap: it sets no_new_privs, under which
    the setuid newuidmap maps nothing."""
    needed = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parents[1]}
    needed |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    needed.add(ROOT)
    closed: set[Path] = set()
    wanted: set[Path] = set()
    for path in needed:
        above = [a for a in reversed(path.parents) if a != Path("/") and not a.stat().st_mode & 1]
        if above:
            closed.add(above[0])
            wanted.add(path)
    stage.mkdir(mode=0o700)
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
    setpriv = shutil.which("setpriv") or "setpriv"
    return [
        *(unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"),
        *(setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"),
    ]
