"""A run killed with SIGKILL part-way and resumed ends with exactly tasks x repeats rollouts, no
duplicates, and the same rewards as an uninterrupted run with the same seed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb

from tests.conftest import GYM, gym

CONFIG = """\
benchmark: arithmetic-smoke
repeats: 8
concurrency: 4
model: {{faults: {{latency_ms: 25}}}}
out: {out}
"""
EXPECTED = 50 * 8


def _rows(store: Path) -> dict[tuple[str, int], tuple]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            """
            SELECT r.task_id, r.repeat_index, r.rollout_id, r.status, r.output_text, v.reward,
                   v.passed
            FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
            """
        ).fetchall()
    finally:
        con.close()
    return {(row[0], row[1]): row[2:] for row in rows}


def _kill_after_first_commit(config: Path, cwd: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    process = subprocess.Popen(
        [GYM, "eval", "run", str(config)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 180
    try:
        for line in process.stdout:
            if line.startswith("rollouts: ") or time.monotonic() > deadline:
                break
        time.sleep(0.3)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)


def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    killed_cfg, whole_cfg = tmp_path / "killed.yaml", tmp_path / "whole.yaml"
    killed_cfg.write_text(CONFIG.format(out=tmp_path / "killed"))
    whole_cfg.write_text(CONFIG.format(out=tmp_path / "whole"))

    _kill_after_first_commit(killed_cfg, tmp_path)
    partial = _rows(tmp_path / "killed" / "gymflow.duckdb")
    assert 0 < len(partial) < EXPECTED, f"kill should land mid-run, stored {len(partial)}"

    refused = gym("eval", "run", str(killed_cfg), cwd=tmp_path)
    assert refused.returncode != 0 and "--resume" in refused.stderr
    assert _rows(tmp_path / "killed" / "gymflow.duckdb") == partial

    gym("eval", "run", str(killed_cfg), "--resume", cwd=tmp_path, check=True)
    gym("eval", "run", str(whole_cfg), cwd=tmp_path, check=True)
    resumed = _rows(tmp_path / "killed" / "gymflow.duckdb")
    whole = _rows(tmp_path / "whole" / "gymflow.duckdb")

    assert len(resumed) == EXPECTED
    for key, row in partial.items():
        assert resumed[key] == row, "resume must not touch rollouts already stored"
    assert resumed == whole
