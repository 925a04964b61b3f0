"""Disk full during a run: the store's files may not grow past a limit (RLIMIT_FSIZE on the `gym`
process, which needs no root and fails writes exactly as a full disk does). The run stops with a
clear error naming the store; what was committed before is intact; `--resume` completes it."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

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
