"""Disk full during a run: the store's files may not grow past a limit (RLIMIT_FSIZE on the `gym`
process, which needs no root and fails writes exactly as a full disk does). The run stops with a
clear error naming the store; what was committed before is intact; `--resume` completes it."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import GYM
from tests.faults.stores import gym_env, query, rollout_rows, run_gym

EXPECTED = 50 * 20
LIMIT_BYTES = 1_500_000
CONFIG = """\
benchmark: arithmetic-smoke
repeats: 20
out: {out}
"""


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))


def test_disk_full_stops_clearly_and_keeps_what_was_committed(tmp_path: Path, prefect_api: str):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.format(out=tmp_path / "run"))
    store = tmp_path / "run" / "gymflow.duckdb"

    full = subprocess.run(
        [GYM, "eval", "run", str(config)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200", **gym_env(prefect_api)},
        preexec_fn=_limit_file_size,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert full.returncode == 3, full.stdout + full.stderr  # exit_codes.RUNTIME
    last_words = " ".join(full.stderr[full.stderr.rindex("error: ") :].split())  # unwrapped
    assert f"{store}: cannot commit" in last_words
    assert "File too large" in last_words and "--resume" in last_words

    kept = rollout_rows(store)
    assert 0 < len(kept) < EXPECTED
    incomplete = query(
        store,
        """
        SELECT count(*) FROM rollouts r
        WHERE num_model_calls <> (SELECT count(*) FROM model_calls c
                                  WHERE c.rollout_id = r.rollout_id)
           OR (status = 'completed' AND NOT EXISTS
               (SELECT 1 FROM verifications v WHERE v.rollout_id = r.rollout_id))
        """,
    )
    assert incomplete == [(0,)]

    resumed = run_gym("eval", "run", str(config), "--resume", cwd=tmp_path,
                      prefect_api=prefect_api, check=True)  # fmt: skip
    assert "missing 0" in resumed.stdout
    after = rollout_rows(store)
    assert len(after) == EXPECTED
    assert {key: after[key] for key in kept} == kept


def _limit_to_64_kib() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_an_export_that_fills_the_disk_keeps_the_previous_export_whole(tmp_path: Path) -> None:
    """`gym export` wrote over its files in place: a disk that filled half-way left the previous
    export cut at the limit (its sidecar emptied) in place of a whole one, a file that reads as
    part of a run. Written aside and renamed at the end, the old files stay as they were."""
    b = StoreBuilder(RunMeta(repeats=2))
    for i in range(100):
        b.task(f"t{i:03d}", i)
        b.fill(f"t{i:03d}", "10")
    b.write(tmp_path / "run")
    command = [GYM, "export", "run", "--format", "nemo-gym", "--out", "r.jsonl"]
    env = {**os.environ, "COLUMNS": "200"}
    subprocess.run(command, cwd=tmp_path, env=env, check=True, capture_output=True)
    names = ("r.jsonl", "r_failures.jsonl", "r_materialized_inputs.jsonl")
    before = {name: (tmp_path / name).read_bytes() for name in names}
    assert len(before["r.jsonl"]) > 64 * 1024  # the limit falls inside the rollout file

    full = subprocess.run(
        command, cwd=tmp_path, env=env, preexec_fn=_limit_to_64_kib, capture_output=True, text=True
    )
    assert full.returncode == 1, full.stdout + full.stderr
    assert "cannot write: File too large" in full.stderr
    assert {name: (tmp_path / name).read_bytes() for name in names} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "run"])  # no partials
