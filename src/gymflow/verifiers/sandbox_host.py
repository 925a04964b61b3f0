"""What a sandbox takes from its host: a slot (bounded concurrency, and a user id of its own
per slot), a scratch folder, and a memory cgroup where the host lets us make one; and the sweep
that returns what a killed owner left behind."""

from __future__ import annotations

import functools
import os
import queue
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from gymflow.core.processes import pid_alive
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
            removed.append(folder)
    cgroups = memory_cgroups()
    if cgroups is not None and root is None:
        for group in cgroups.root.glob(f"{SCRATCH_PREFIX}*"):
            if _orphaned(group) and cgroups.remove(group):
                removed.append(group)
    return removed


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
