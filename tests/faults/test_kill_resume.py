"""SIGKILL of a running `gym eval run` at 10 seeded random moments, each followed by `--resume`:
the final store equals an uninterrupted run of the same config and seed, row for row.

The kills land in sequence on one run directory, so each resume is also the run the next kill
interrupts. The model server's latency paces collection (concurrency 4 x 50 ms) so that the run
lasts longer than the ten kill windows on any machine; most kills land during collection, a few
during start-up, where a kill must not corrupt the store either."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.conftest import GYM
from tests.faults.stores import gym_env, query, rollout_rows, run_gym

TASKS, REPEATS = 50, 40
EXPECTED = TASKS * REPEATS
KILLS = 10
SEED = 20261130
CONFIG = f"""\
benchmark: arithmetic-smoke
repeats: {REPEATS}
concurrency: 4
model:
  faults:
    latency_ms: 50
out: {{out}}
"""


def kill_moments(seed: int) -> list[tuple[str, float]]:
    """(anchor, delay): `start` counts from launch; `collecting` from the first progress line
    that counts a rollout this run stored."""
    rng = random.Random(seed)
    return [
        ("start", rng.uniform(0.2, 2.0))
        if rng.random() < 0.2
        else ("collecting", rng.uniform(0, 2))
        for _ in range(KILLS)
    ]


def run_and_kill(
    config: Path, cwd: Path, prefect_api: str, anchor: str, delay: float, stored: int
) -> str:
    """Start `gym eval run --resume` on a store holding `stored` rollouts, SIGKILL it at the
    moment; return what it printed. A resumed run's first line counts what it found stored
    (then its first batch, a second or more on a loaded machine): `collecting` waits for a
    line past `stored`, so a kill lands in the collection, not before it (the full suite's run
    of 85efcb0 saw six of ten kills store nothing new)."""
    process = subprocess.Popen(
        [GYM, "eval", "run", str(config), "--resume"],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **gym_env(prefect_api)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    collecting = threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("rollouts: ") and int(line.split()[1].split("/")[0]) > stored:
                collecting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if anchor == "collecting":
        assert collecting.wait(timeout=180), "".join(lines)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    reader.join(timeout=10)
    return "".join(lines)


def stored_count(store: Path) -> int:
    return query(store, "SELECT count(*) FROM rollouts")[0][0]


def test_ten_kills_and_resumes_equal_an_uninterrupted_run(tmp_path: Path, prefect_api: str):
    killed_cfg, whole_cfg = tmp_path / "killed.yaml", tmp_path / "whole.yaml"
    killed_cfg.write_text(CONFIG.format(out=tmp_path / "killed"))
    whole_cfg.write_text(CONFIG.format(out=tmp_path / "whole"))
    store = tmp_path / "killed" / "gymflow.duckdb"

    # The reference run goes alongside the kills: the model's latency, not the CPU, paces both.
    whole_log = (tmp_path / "whole.log").open("w")
    whole = subprocess.Popen(
        [GYM, "eval", "run", str(whole_cfg)],
        cwd=tmp_path,
        env={**os.environ, **gym_env(prefect_api)},
        stdout=whole_log,
        stderr=subprocess.STDOUT,
    )

    counts: list[int] = []
    interrupted_collection = 0
    for anchor, delay in kill_moments(SEED):
        before = rollout_rows(store) if store.exists() else {}
        run_and_kill(killed_cfg, tmp_path, prefect_api, anchor, delay, len(before))
        after = rollout_rows(store) if store.exists() else {}
        # What a kill leaves is whole: every stored rollout has its calls and, when completed,
        # its verification; and nothing stored before was changed by the resumed run.
        assert {k: after[k] for k in before} == before
        orphans = (
            query(
                store,
                """
            SELECT count(*) FROM rollouts r
            WHERE num_model_calls <> (SELECT count(*) FROM model_calls c
                                      WHERE c.rollout_id = r.rollout_id)
               OR (status = 'completed' AND NOT EXISTS
                   (SELECT 1 FROM verifications v WHERE v.rollout_id = r.rollout_id))
            """,
            )
            if after
            else [(0,)]
        )
        assert orphans == [(0,)]
        counts.append(len(after))
        interrupted_collection += before.keys() < after.keys() and len(after) < EXPECTED

    assert counts[-1] < EXPECTED, f"the tenth kill should still find work to do: {counts}"
    assert interrupted_collection >= KILLS // 2, f"too few kills landed mid-collection: {counts}"

    final = run_gym("eval", "run", str(killed_cfg), "--resume", cwd=tmp_path,
                    prefect_api=prefect_api, check=True)  # fmt: skip
    assert "missing 0" in final.stdout, final.stdout
    assert whole.wait(timeout=600) == 0, (tmp_path / "whole.log").read_text()
    whole_log.close()

    resumed = rollout_rows(store)
    reference = rollout_rows(tmp_path / "whole" / "gymflow.duckdb")
    assert len(resumed) == len(reference) == EXPECTED
    assert resumed == reference
    assert query(store, "SELECT count(DISTINCT (task_id, repeat_index)) FROM rollouts") == [
        (EXPECTED,)
    ]
