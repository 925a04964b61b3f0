"""The seal's once-per-store-state shortcut, attacked (issue 42, second attacker's pass over
84b21e2): health skipped recomputing the seals when the store's file state (device, inode,
size, mtime and ctime of the database and its WAL, taken by path) was one a full check had
passed in. Two ways kept that state while the content changed:

- a write through a shared memory map whose pages were already dirty before the owner's check
  (no page fault, so neither mtime nor ctime moves, even after msync): health said "healthy,
  the store is unchanged since" with pass@1 at 100%;
- the run folder swapped for a forged copy while health opened it, and swapped back before
  the state was taken (a folder rename moves no file's ctime): health read the forged file
  and took the original's recorded state for it.

Now the state is that of the file DuckDB has open (its descriptor, not the path), and the
shortcut also needs the SHA-256 of that file's bytes to be the one recorded: a write by any
means changes it, so health checks in full and finds every forged verdict."""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
import os
import shutil
import threading
from pathlib import Path

import pytest

from tests.conftest import gym_in_process
from tests.faults.stores import collect_run, copied_run, edit_store, rollout_rows, seal_health

FORGED = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)",
    "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run every test here attacks a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


def _pass_at_1(run: Path, cwd: Path) -> tuple[int, float]:
    """Profile's exit code (2: it found the store's seals broken) and pass@1."""
    done = gym_in_process("eval", "profile", str(run), "--json", cwd=cwd)
    assert done.returncode in (0, 2), done.stderr
    return done.returncode, json.loads(done.stdout)["pass@1"]


def _forged_copy(run: Path, folder: Path) -> Path:
    """The run's store with every failing verdict rewritten as a pass, made beside it."""
    forged = folder / "run"
    shutil.copytree(run, forged)
    edit_store(forged, *FORGED)
    return forged


def test_a_write_through_a_shared_map_is_not_taken_as_unchanged(
    honest: Path, tmp_path: Path
) -> None:
    run = copied_run(honest, tmp_path / "run")
    store = run / "gymflow.duckdb"
    forged = _forged_copy(run, tmp_path / "forged") / "gymflow.duckdb"
    size = max(store.stat().st_size, forged.stat().st_size)
    for path in (store, forged):  # one size: trailing zeros DuckDB never reads
        os.truncate(path, size)
    before = (_pass_at_1(run, tmp_path), rollout_rows(store))
    assert before[0][0] == 0 and before[0][1] < 1.0
    image = forged.read_bytes()
    with open(store, "r+b") as opened, mmap.mmap(opened.fileno(), size) as mapped:
        for at in range(0, size, mmap.PAGESIZE):  # every page dirtied: later writes fault never
            mapped[at : at + 1] = mapped[at : at + 1]
        first = seal_health(run, tmp_path, gym_command=gym_in_process)
        assert first == {"code": 0, "verdict": "healthy", "mismatch": 0, "checked_at": None}
        state = os.stat(store)
        mapped[:] = image
        mapped.flush()
        after_write = os.stat(store)
    kept = [
        getattr(state, name) == getattr(after_write, name)
        for name in ("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")
    ]
    if not all(kept):
        pytest.skip("this file system moved the file's times on a write to a dirty page")
    # what the attack wants read, which profile's own seal check (not taken from the record
    # either) flags: exit 2
    assert _pass_at_1(run, tmp_path) == (2, 1.0)
    after = seal_health(run, tmp_path, gym_command=gym_in_process)
    assert after["checked_at"] is None, after  # recomputed, not taken from the record
    assert (after["code"], after["verdict"]) == (2, "unhealthy") and after["mismatch"] > 0
    assert rollout_rows(store) != before[1]  # the forged content, read and refused


IN_OPEN = 0x20


class _Opened(threading.Event):
    later = 0


@contextlib.contextmanager
def _swapped_while_opened(run: Path, forged: Path):
    """Put the forged folder at the run's path; once something opens its store, put the
    original back (a folder rename: no file's ctime moves)."""
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init()
    assert watch >= 0
    libc.inotify_add_watch(watch, str(forged / "gymflow.duckdb").encode(), IN_OPEN)
    aside = run.with_name(".original")
    os.rename(run, aside)
    os.rename(forged, run)
    opened = _Opened()

    def swap_back() -> None:
        os.read(watch, 4096)  # the reader opened the forged store
        os.rename(run, forged)
        os.rename(aside, run)
        opened.set()

    thread = threading.Thread(target=swap_back, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        thread.join(timeout=60)
        # the forged file's later opens (the watch follows its inode): none means every open
        # after the first, the one the reader kept included, was of the original
        os.set_blocking(watch, False)
        try:
            opened.later = len(os.read(watch, 4096)) // 16  # one 16-byte event per open
        except BlockingIOError:
            opened.later = 0
        os.close(watch)


def test_a_run_folder_swapped_while_health_opens_it_is_not_taken_as_checked(
    honest: Path, tmp_path: Path
) -> None:
    run = copied_run(honest, tmp_path / "runs" / "run")
    store = run / "gymflow.duckdb"
    forged = _forged_copy(run, tmp_path / "forged")
    stored = rollout_rows(store)
    first = seal_health(run, tmp_path, gym_command=gym_in_process)
    assert first == {"code": 0, "verdict": "healthy", "mismatch": 0, "checked_at": None}
    with _swapped_while_opened(run, forged) as opened:
        # a `gym` process (`seal_health`'s default): the swap races another process's open,
        # not this one's reader, which would hold the thread swapping back at the GIL
        raced = seal_health(run, tmp_path)
    assert opened.is_set() and rollout_rows(store) == stored  # the original is back
    if raced["checked_at"] is not None:
        # the swap back won the race: the reader opened the forged file once (a probe) and read
        # the original, which its record vouches for, as it should
        assert opened.later == 0 and raced["verdict"] == "healthy", raced
    else:  # the forged file read: checked in full and unhealthy, or refused mid-swap
        assert raced["code"] != 0 and raced["verdict"] != "healthy", raced
    # the original, unchanged: still taken from its record
    again = seal_health(run, tmp_path, gym_command=gym_in_process)
    assert again["verdict"] == "healthy" and again["checked_at"] is not None
