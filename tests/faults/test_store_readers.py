"""Readers never break writers. A run used to open its store once per batch, so a reader (`gym
eval profile` in a loop, a notebook's read-only connection) could hold it between two batches,
and the next batch failed to take the lock: the run crashed (1 run in 4). Now a run holds its
store from its first batch to its last (and waits with backoff for a reader that holds it
before), the run completes, and every reader either reads what was committed or is told plainly
that a run is writing the store."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb

from gymflow.cli import exit_codes
from tests.faults.stores import one_error_line, orphans, query, run_gym
from tests.faults.test_run_control import Running

CONFIG = """\
benchmark: arithmetic-smoke
repeats: 20
batch_size: 25
concurrency: 8
model:
  faults:
    latency_ms: 5
out: {out}
"""
EXPECTED = 50 * 20
HOLD_S = 0.3  # longer than a batch boundary: a writer that let go between batches met it


def _hold_the_store_in_a_loop(store: Path, stop: threading.Event, seen: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            con = duckdb.connect(str(store), read_only=True)
        except duckdb.Error:  # the writer holds it: a reader waits, it never breaks the writer
            seen["refused"] += 1
        else:
            try:
                con.execute("SELECT count(*) FROM rollouts").fetchone()
                seen["read"] += 1
                time.sleep(HOLD_S)
            finally:
                con.close()
        time.sleep(0.02)


def test_readers_between_batches_never_crash_the_run(tmp_path: Path, prefect_api: str):
    out = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.format(out=out))
    store = out / "gymflow.duckdb"

    run = Running(["eval", "run", str(config)], tmp_path, prefect_api)
    run.wait_collecting()
    stop, seen = threading.Event(), {"read": 0, "refused": 0}
    reader = threading.Thread(target=_hold_the_store_in_a_loop, args=(store, stop, seen))
    reader.start()
    profiles = []
    try:
        while run.process.poll() is None and len(profiles) < 3:
            profiles.append(run_gym("eval", "profile", str(out), cwd=tmp_path,
                                    prefect_api=prefect_api))  # fmt: skip
    finally:
        code, stdout, stderr = run.finish()
        stop.set()
        reader.join(timeout=30)

    assert code == exit_codes.OK, stdout + stderr
    assert "missing 0" in stdout
    assert seen["refused"] > 0, seen  # the reader met the run writing ...
    assert seen["read"] > 0, seen  # ... and read once it was done
    for profile in profiles:
        if profile.returncode == exit_codes.OK:
            assert "coverage: expected 1000" in profile.stdout  # what was committed
        else:
            assert "a run is writing this store right now" in one_error_line(profile.stderr)
    assert query(store, "SELECT count(*) FROM rollouts") == [(EXPECTED,)]
    assert orphans(store) == 0
