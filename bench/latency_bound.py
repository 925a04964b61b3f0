"""Latency-bound runs: rollouts/s at a fixed model latency against the bound concurrency/latency.

With a real model, a run waits on the model: at concurrency C and latency L its bound is C / L
rollouts/s. The local policy server answers every request after `--latency-ms` (a seeded fault
setting of the simulation), and the figure is the collection rate the whole `gym eval run` flow
reaches (rollouts stored ÷ time from the first rollout's start to the last one's end), beside one
continuous collector (`run_collect` over every key at once: no batch boundaries) and the bound.
`--batch-size` runs the flow with a batch size set by hand, e.g. 2000, the old default.

    python bench/latency_bound.py [--rollouts 20480] [--concurrency 1024] [--latency-ms 1000]
                                  [--batch-size N] [--skip-collector]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import tiny  # noqa: E402  (bench/tiny.py: the --tiny flag every script takes)
from e2e_rollouts import BENCHMARK, GYM, PREFECT_HOME, write_benchmark  # noqa: E402


def config(run_dir: Path, concurrency: int, latency_ms: float, batch_size: int | None) -> dict:
    spec = {
        "benchmark": BENCHMARK,
        "out": str(run_dir),
        "concurrency": concurrency,
        "model": {"kind": "local", "faults": {"latency_ms": latency_ms}},
    }
    if batch_size:
        spec["batch_size"] = batch_size
    return spec


def collection_rate(run_dir: Path) -> tuple[int, float]:
    """(rollouts stored, rollouts per second between the first start and the last finish)."""
    from gymflow.store.db import connect

    with connect(run_dir, read_only=True) as con:
        count, span = con.execute(
            "SELECT count(*), epoch(max(finished_at)) - epoch(min(started_at)) FROM rollouts"
        ).fetchone()
    return count, count / span


def run_flow(root: Path, spec: dict) -> tuple[int, float, float]:
    path = root / "flow.yaml"
    path.write_text(yaml.safe_dump(spec))
    PREFECT_HOME.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(PREFECT_HOME),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }
    started = time.perf_counter()
    result = subprocess.run([GYM, "eval", "run", str(path)], env=env, capture_output=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"gym eval run failed:\n{result.stdout.decode()}\n{result.stderr.decode()}")
    return (*collection_rate(Path(spec["out"])), wall)


def run_collector(spec: dict) -> tuple[int, float]:
    from gymflow.config import EvalConfig
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import model_endpoint
    from gymflow.store.db import connect

    plan = resolve(EvalConfig.model_validate(spec))
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    with model_endpoint(plan) as base_url:
        run_collect(plan, plan.keys(), con, base_url=base_url)
    con.close()
    return collection_rate(plan.run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20_480)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--latency-ms", type=float, default=1000.0)
    parser.add_argument("--batch-size", type=int, help="set by hand (default: gymflow's)")
    parser.add_argument("--skip-collector", action="store_true")
    args = tiny.parse(parser, rollouts=128, concurrency=64, latency_ms=200.0)
    bound = args.concurrency / (args.latency_ms / 1000)

    with tempfile.TemporaryDirectory(prefix="gymflow-bench-") as tmp:
        root = Path(tmp)
        extra = os.environ.get("GYMFLOW_ENVIRONMENTS_PATH")
        os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = os.pathsep.join(
            [str(root / "envs"), *([extra] if extra else [])]
        )
        tasks, repeats = write_benchmark(root / "envs", "arithmetic", "full", args.rollouts)
        flow_spec = config(root / "flow", args.concurrency, args.latency_ms, args.batch_size)
        flow = run_flow(root, flow_spec)
        collector = None
        if not args.skip_collector:
            collector = run_collector(config(root / "collector", args.concurrency,
                                             args.latency_ms, None))  # fmt: skip

    print(
        f"latency-bound runs: arithmetic, {tasks} tasks x {repeats} repeats, concurrency "
        f"{args.concurrency}, model latency {args.latency_ms:g} ms, batch size "
        f"{args.batch_size or 'default'}; bound = concurrency / latency = {bound:,.0f} rollouts/s"
    )
    print(f"{'measure':<34}{'rollouts':>10}{'rollouts/s':>12}{'÷ bound':>9}{'wall s':>8}")
    count, rate, wall = flow
    print(f"{'gym eval run (flow)':<34}{count:>10,}{rate:>12,.0f}{rate / bound:>9.2f}{wall:>8.1f}")
    if collector:
        count, rate = collector
        print(f"{'one continuous collector':<34}{count:>10,}{rate:>12,.0f}{rate / bound:>9.2f}")


if __name__ == "__main__":
    main()
