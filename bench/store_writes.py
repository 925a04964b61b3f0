"""The collector's writer alone: CPU µs a rollout of committing finished rollouts to a store.

Rollouts are collected once at zero model latency (arithmetic, the simulated policy, as
bench/e2e_rollouts.py runs them) and kept in memory instead of being written; then each round
writes them all to a fresh store with `store.writer.write_rollouts`, on this thread, in commits
of each `--group` size: the collector's `FLUSH_EVERY`, and about what its groups grow to at
zero latency. CPU is the process's (DuckDB's threads too). The writer shares the collector's
GIL with the event loop at zero latency, so its CPU a rollout is the loop's loss: this figure,
without the HTTP exchange, the loop or the policy server beside it, is far steadier than the
end-to-end rate. Runs the gymflow on `PYTHONPATH`, so another checkout's figure is one
variable away.

    python bench/store_writes.py [--rollouts 20000] [--rounds 3] [--group 200 1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import e2e_rollouts  # noqa: E402  (a sibling script: its benchmark and collector set-up)
import tiny  # noqa: E402


def collected(root: Path, rollouts: int) -> list:
    """Every rollout of a zero-latency collection, as the collector hands them to the writer."""
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts import collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import local_policy_server
    from gymflow.store.db import connect

    plan = resolve(EvalConfig(benchmark=e2e_rollouts.BENCHMARK, out=str(root / "collect")))
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    kept: list = []

    def keep(_con, batch) -> int:
        kept.extend(batch)
        return len(batch)

    writer = collect.write_rollouts
    collect.write_rollouts = keep  # the committer's thread calls it by this module's name
    try:
        with local_policy_server(plan) as server:
            collect.run_collect(plan, plan.keys(), con, base_url=server.base_url)
    finally:
        collect.write_rollouts = writer
        con.close()
    return kept


def write_round(root: Path, rollouts: list, group: int) -> tuple[float, float]:
    """(CPU s, wall s) of writing `rollouts` to a fresh store in groups of `group`."""
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.store.db import connect
    from gymflow.store.writer import write_rollouts

    plan = resolve(EvalConfig(benchmark=e2e_rollouts.BENCHMARK, out=str(root)))
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    started, cpu = time.perf_counter(), time.process_time()
    for at in range(0, len(rollouts), group):
        write_rollouts(con, rollouts[at : at + group])
    spent = time.process_time() - cpu, time.perf_counter() - started
    con.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--group",
        type=int,
        nargs="+",
        default=[200, 1000],
        help="rollouts a commit: the collector's FLUSH_EVERY, and what its groups grow to at "
        "zero latency while a commit runs",
    )
    args = tiny.parse(parser, rollouts=400, rounds=1, group=[200])
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-") as tmp:
        root = Path(tmp)
        extra = os.environ.get("GYMFLOW_ENVIRONMENTS_PATH")
        os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = os.pathsep.join(
            [str(root / "envs"), *([extra] if extra else [])]
        )
        e2e_rollouts.write_benchmark(root / "envs", "arithmetic", "full", args.rollouts)
        rollouts = collected(root, args.rollouts)
        # as while collecting (`collect._RunLongGC`): what was alive before is left out of every
        # scan, here the rollouts kept, which the collector held only until their commit
        from gymflow.rollouts.collect import GC_YOUNG_THRESHOLD

        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        rounds = {
            group: [
                write_round(root / f"round-{group}-{i}", rollouts, group)
                for i in range(args.rounds)
            ]
            for group in args.group
        }
    count = len(rollouts)
    print(
        f"store writes: {count:,} arithmetic rollouts, {args.rounds} rounds a group size, one "
        f"thread (load {os.getloadavg()[0]:.1f})"
    )
    rows = []
    for group, spent in rounds.items():
        cpu = [1e6 * cpu / count for cpu, _ in spent]
        wall = [1e6 * wall / count for _, wall in spent]
        rows.append(
            [f"{group:,} a commit", " ".join(f"{v:.1f}" for v in cpu),
             f"{statistics.median(cpu):.1f}", f"{statistics.median(wall):.1f}"]
        )  # fmt: skip
    e2e_rollouts.ceiling.print_table(
        ["rollouts a commit", "CPU µs a rollout, each round", "median CPU µs", "median wall µs"],
        rows,
    )


if __name__ == "__main__":
    main()
