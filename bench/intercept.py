"""The fixed cost of `gym eval run` as issue 45 defines it: the intercept of wall time against
rollouts, from a 200-rollout and a 10,000-rollout run of the simulated policy at zero latency,
against the local Prefect server (`gym server --start`), for this checkout and, interleaved run by
run, others (`--compare-src`). Each command's wall and CPU seconds (its children, the policy
server, included) are printed with the slope (ms a rollout) and the intercept, then the medians
beside the 3 s bound.

    python bench/intercept.py [--rounds 3] [--compare-src /tmp/old/src ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny
from fixed_cost import SRC, local_api

BOUND_S = 3.0
SMALL = ["--benchmark", "arithmetic-smoke"]  # 50 tasks x 4 repeats


@dataclass(frozen=True)
class Round:
    small: tuple[float, float]
    large: tuple[float, float]
    rollouts: tuple[int, int]
    load: float

    @property
    def slope(self) -> float:
        return (self.large[0] - self.small[0]) / (self.rollouts[1] - self.rollouts[0])

    @property
    def intercept(self) -> float:
        return self.small[0] - self.rollouts[0] * self.slope


def run(src: Path, args: list[str], out: Path, api: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `gym eval run`, its children included."""
    env = {**os.environ, "PYTHONPATH": str(src), "GYMFLOW_WARM": "off", "PREFECT_API_URL": api}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", "eval", "run", *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{src} {args}: exit {done.returncode}\n{done.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, default=SRC)
    parser.add_argument("--compare-src", type=Path, nargs="+", default=[])
    parser.add_argument("--tasks", type=int, default=250, help="the large run's tasks")
    parser.add_argument("--repeats", type=int, default=40, help="the large run's repeats")
    args = tiny.parse(parser, rounds=1, tasks=50, repeats=8)
    large = ["--environment", "arithmetic", "--limit", str(args.tasks)]
    large += ["--repeats", str(args.repeats)]
    rollouts = (200, args.tasks * args.repeats)
    api = local_api()
    found: dict[Path, list[Round]] = {src: [] for src in [args.src, *args.compare_src]}
    with tempfile.TemporaryDirectory(prefix="gymflow-intercept-") as tmp:
        for r in range(args.rounds):
            for i, (src, rounds) in enumerate(found.items()):
                load = os.getloadavg()[0]
                small = run(src, SMALL, Path(tmp) / f"s{r}-{i}", api)
                big = run(src, large, Path(tmp) / f"l{r}-{i}", api)
                one = Round(small, big, rollouts, load)
                rounds.append(one)
                print(f"round {r} {src}: {rollouts[0]}: {small[0]:.2f} s ({small[1]:.2f} CPU), "
                      f"{rollouts[1]:,}: {big[0]:.2f} s ({big[1]:.2f} CPU), "
                      f"{1000 * one.slope:.3f} ms a rollout, intercept {one.intercept:.2f} s, "
                      f"load {load:.1f}", flush=True)  # fmt: skip
    for src, rounds in found.items():
        print(f"{src}: median intercept {statistics.median(r.intercept for r in rounds):.2f} s "
              f"(bound {BOUND_S:.1f} s), {rollouts[0]}-rollout "
              f"{statistics.median(r.small[0] for r in rounds):.2f} s, {rollouts[1]:,} "
              f"{statistics.median(r.large[0] for r in rounds):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
