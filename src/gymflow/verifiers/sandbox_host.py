"""What a sandbox takes from its host: a slot (bounded concurrency, and a user id of its own
per slot), a scratch folder, and a memory cgroup where the host lets us make one; and the sweep
that returns what a killed owner left behind.

Whose user id a sandbox runs as (`sandbox_user`). As root, the slot's id itself. Without root, a
user namespace mapping one id to one id (bubblewrap's `--unshare-user --uid N`) would not help:
the kernel still sees the owner's id, so every file of the owner's that the sandbox's root shows
(an install prefix, the interpreter's) stays readable and the process budget is the owner's. So
the sandbox runs in a user namespace whose root is the owner and whose other ids are the owner's
subordinate ids (/etc/subuid and /etc/subgid, which Debian's useradd gives every new user, mapped
by the setuid newuidmap and newgidmap of the `uidmap` package, as rootless containers do): inside
it the same two bubblewraps run as they do for root, and the command's id is a subordinate one,
which owns nothing of the owner's and may signal none of its processes. Where the host gives no
subordinate ids (no range, no uidmap, no unprivileged user namespaces) the commands keep the
owner's id, said once per process: refusing would stop every code verification on a host where
uidmap is not installed (Debian does not by default), while the allow-list root
(`sandbox.system_root`) already keeps the home, the key and the runs out of the sandbox whoever it
runs as; what the owner's id adds is the owner-only files inside what that root shows."""

from __future__ import annotations

import functools
import os
import pwd
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from gymflow.core import progress
from gymflow.core.processes import child_env, pid_alive
from gymflow.core.trees import remove_tree

#: Sandbox user ids live far above any real account: base + (pid % 4096) * 64 + slot.
UID_BASE = 1_000_000
SLOT_SPAN = 64
SCRATCH_PREFIX = "gymflow-sandbox-"


# -- slots: bounded concurrency and one user id per concurrent sandbox ---------------------------
_slots: queue.Queue[int] | None = None
_slots_lock = threading.Lock()


def pool_size() -> int:
    """Sandboxes that may run at once: one per core."""
    return os.cpu_count() or 1


def _slot_queue() -> queue.Queue[int]:
    global _slots
    with _slots_lock:  # the first verifications arrive on several threads at once
        if _slots is None:
            slots: queue.Queue[int] = queue.Queue()
            for slot in range(min(pool_size(), SLOT_SPAN)):
                slots.put(slot)
            _slots = slots
        return _slots


@contextmanager
def held_slot() -> Iterator[int]:
    slots = _slot_queue()
    slot = slots.get()
    try:
        yield slot
    finally:
        slots.put(slot)


def sandbox_uid(slot: int) -> int:
    return UID_BASE + (os.getpid() % 4096) * SLOT_SPAN + slot


# -- whose user id a sandbox runs as -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SandboxUser:
    """Who a sandbox's command runs as: `uid` (and the group of the same number), taken by
    setpriv before the inner bubblewrap, in the user namespace `namespace` starts; None keeps the
    caller's id. `namespace` is the command line that starts the outer bubblewrap: empty as root,
    else `unshare` making a namespace whose root is the caller (what it owns stays its own) and
    whose ids 1..SLOT_SPAN are subordinate ids. Root in either namespace is the caller itself."""

    uid: int | None
    namespace: tuple[str, ...] = ()


def sandbox_user(uid: int) -> SandboxUser:
    """Who runs a sandbox whose slot gives it `uid` (a `sandbox_uid`): see the module docstring."""
    if os.geteuid() == 0:
        return SandboxUser(uid)
    namespace = _subordinate_namespace()
    if isinstance(namespace, str):
        return SandboxUser(None)
    # One id per slot of this process. Another process's sandboxes may take the same one: every
    # command has a user namespace of its own (and PID, IPC, network and mount namespaces), and
    # the kernel counts processes per user namespace, so no two share anything by the id.
    return SandboxUser(1 + (uid - UID_BASE) % SLOT_SPAN, namespace)


#: Where the host lists each user's subordinate ids: `name-or-uid:first:count` a line.
SUBORDINATE_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))


@functools.cache
def _subordinate_namespace() -> tuple[str, ...] | str:
    """The `unshare` command line that maps our id to root and SLOT_SPAN subordinate ids after
    it, tried once; or why there is none, said once (the commands then keep our id)."""
    namespace = _namespace_command()
    if isinstance(namespace, tuple):
        try:
            tried = subprocess.run(
                [*namespace, "/bin/true"],
                capture_output=True,
                text=True,
                timeout=30,
                env=child_env(),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            namespace = f"a user namespace could not be made: {exc}"
        else:
            if tried.returncode == 0:
                return namespace
            last = (tried.stderr.strip().splitlines() or ["no message"])[-1]
            namespace = f"a user namespace of subordinate ids could not be made: {last}"
    progress.say(
        f"warning: sandboxed commands run as your own user id: {namespace}. The sandbox still "
        "shows only the system's programs and the agent's installs, but what you own among them "
        "is readable to what runs in it"
    )
    return namespace


def _namespace_command() -> tuple[str, ...] | str:
    unshare, newuidmap, newgidmap = map(shutil.which, ("unshare", "newuidmap", "newgidmap"))
    if unshare is None or newuidmap is None or newgidmap is None:
        return "newuidmap and newgidmap are not installed (Debian: apt-get install uidmap)"
    subuid, subgid = map(_subordinate_range, SUBORDINATE_FILES)
    if subuid is None or subgid is None:
        return (
            f"/etc/subuid or /etc/subgid gives this user no range of {SLOT_SPAN} ids "
            "(usermod --add-subuids FIRST-LAST --add-subgids FIRST-LAST)"
        )
    return (
        unshare,
        "--map-root-user",
        f"--map-users={subuid},1,{SLOT_SPAN}",
        f"--map-groups={subgid},1,{SLOT_SPAN}",
        "--",
    )


def _subordinate_range(path: Path) -> int | None:
    """The first id of this user's first range in `path` (named by user name or number, in both
    files) holding at least SLOT_SPAN ids, or None."""
    names = {str(os.geteuid())}
    with suppress(KeyError):
        names.add(pwd.getpwuid(os.geteuid()).pw_name)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        owner, _, rest = line.strip().partition(":")
        first, _, count = rest.partition(":")
        if owner in names and first.isdigit() and count.isdigit() and int(count) >= SLOT_SPAN:
            return int(first)
    return None


# -- scratch folders -----------------------------------------------------------------------------
def sweep_orphans(root: str | None = None) -> list[Path]:
    """Remove the scratch folders (and memory cgroups) whose owner process is gone (a verifier
    worker killed with SIGKILL never ran its cleanup); returns what was removed. A folder whose
    owner still runs is left alone, even if the pid was reused: never delete what may be in use."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        if _orphaned(folder) and folder.is_dir():
            with suppress(OSError):
                remove_tree(folder)
            if folder.exists() and os.geteuid() != 0:
                _remove_as_namespace_root(folder)
            removed.append(folder)
    cgroups = memory_cgroups()
    if cgroups is not None and root is None:
        for group in cgroups.root.glob(f"{SCRATCH_PREFIX}*"):
            if _orphaned(group) and cgroups.remove(group):
                removed.append(group)
    return removed


def _remove_as_namespace_root(folder: Path) -> None:
    """Remove what a command left in `folder` as one of our subordinate ids (its owner was killed
    before it took the folders back): only root of our user namespace may."""
    namespace = _subordinate_namespace()
    if isinstance(namespace, tuple):
        with suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [*namespace, "rm", "-rf", "--", str(folder)],
                timeout=60,
                check=False,
                env=child_env(),
            )


def _orphaned(path: Path) -> bool:
    owner = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
    return owner.isdigit() and not pid_alive(int(owner))


# -- memory cgroups ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cgroups:
    """A cgroup hierarchy with the memory controller where we may make children: the file that
    sets a child's memory limit, the one that keeps it from swapping past it, and the one that
    counts its out-of-memory kills."""

    root: Path
    limit: str
    swap: tuple[str, bool]  # (file, whether it bounds memory plus swap or swap alone)
    events: str

    def make(self, name: str, limit: int) -> Path | None:
        group = self.root / name
        swap_file, with_memory = self.swap
        try:
            group.mkdir()
            (group / self.limit).write_text(str(limit))
            if (group / swap_file).exists():  # absent where swap is not accounted
                (group / swap_file).write_text(str(limit if with_memory else 0))
        except OSError:
            self.remove(group)
            return None
        return group

    def oom_killed(self, group: Path) -> bool:
        try:
            counts = dict(line.split() for line in (group / self.events).read_text().splitlines())
        except (OSError, ValueError):
            return False
        return counts.get("oom_kill", "0") != "0"

    def kill_all(self, group: Path) -> None:
        """SIGKILL every process still in `group`: the PID namespace's processes outlive their
        init by a moment, and a cgroup with members cannot be removed."""
        with suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                with suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self, group: Path) -> bool:
        for _ in range(50):
            self.kill_all(group)
            try:
                group.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                time.sleep(0.02)
        return False  # left for sweep_orphans


@functools.cache
def memory_cgroups() -> Cgroups | None:
    """The memory cgroup hierarchy this host lets us use, found by making (and removing) a child;
    None when there is none (not root, a container without cgroup access)."""
    unified = Path("/sys/fs/cgroup")
    v1 = unified / "memory"
    candidates = [
        Cgroups(
            v1, "memory.limit_in_bytes", ("memory.memsw.limit_in_bytes", True), "memory.oom_control"
        )
    ]
    with suppress(OSError):
        if "memory" in (unified / "cgroup.subtree_control").read_text().split():
            candidates.append(
                Cgroups(unified, "memory.max", ("memory.swap.max", False), "memory.events")
            )
    for cgroups in candidates:
        probe = cgroups.make(f"{SCRATCH_PREFIX}{os.getpid()}-probe", 64 << 20)
        if probe is not None:
            cgroups.remove(probe)
            return cgroups
    return None
