"""A small run's wall time: `gym eval run --benchmark arithmetic-smoke` (200 rollouts), in
Prefect's ephemeral mode and against the local server `gym server --start` leaves running, beside
the part of it spent collecting (the store's first rollout start to last finish).

    python bench/startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GYM = str(Path(sys.executable).parent / "gym")


def one_run(cwd: Path, env: dict, index: int) -> tuple[float, float]:
    out = cwd / f"run-{index}"
    started = time.perf_counter()
    result = subprocess.run(
        [GYM, "eval", "run", "--benchmark", "arithmetic-smoke", "--out", str(out)],
        cwd=cwd, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"gym eval run failed:\n{result.stdout}\n{result.stderr}")
    from gymflow.store.db import connect

    with connect(out, read_only=True) as con:
        span = con.execute(
            "SELECT epoch(max(finished_at)) - epoch(min(started_at)) FROM rollouts"
        ).fetchone()[0]
    return wall, span


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gymflow-startup-") as tmp:
        home = Path(tmp) / "prefect-home"
        env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": ""}
        one_run(Path(tmp), env, -1)  # the first run in a new PREFECT_HOME migrates its database
        for mode in ("ephemeral", "local server"):
            if mode == "local server":
                subprocess.run([GYM, "server", "--start"], env=env, check=True, capture_output=True)
            try:
                figures = [one_run(Path(tmp), env, i + 100 * len(rows)) for i in range(args.runs)]
            finally:
                if mode == "local server":
                    subprocess.run([GYM, "server", "--stop"], env=env, capture_output=True)
            walls, spans = zip(*figures, strict=True)
            rows.append((mode, statistics.median(walls), min(walls), statistics.median(spans)))
    print(f"gym eval run --benchmark arithmetic-smoke (200 rollouts), median of {args.runs}, "
          f"{os.cpu_count()} cores (shared machine: noisy); goal: under 3 s wall")  # fmt: skip
    print(f"{'Prefect':<14}{'wall s':>8}{'best s':>8}{'collecting s':>14}")
    for mode, wall, best, span in rows:
        print(f"{mode:<14}{wall:>8.2f}{best:>8.2f}{span:>14.2f}")


if __name__ == "__main__":
    main()
