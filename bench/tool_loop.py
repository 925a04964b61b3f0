"""Tool-loop throughput: rollouts/s, peak memory and achieved concurrency for a 3-turn tool
environment, through gymflow's real collector (harness, client, resources server, DuckDB store).

The environment is `ledger` (tests/harness/envs): two parallel deposits, a balance read, an answer
— three model calls per rollout. The local policy server plays every task perfectly (skill 1), so
every rollout is exactly three turns. Each scenario runs in its own process, so its peak RSS is its
own. Achieved concurrency is measured at the server: the mean number of requests in flight over
the collection (the time-integral of in-flight requests divided by the elapsed time) and the peak;
and at the client, by Little's law (the recorded call latencies summed, over the elapsed time).
With no latency the server answers each request before it reads the next, so its figure is ~1
there by construction and the client's figure is the one to read. Client CPU per rollout and the
share of the wall time the client process was on a CPU say whether the collector was CPU-bound.

    python bench/tool_loop.py [--rollouts 3000] [--concurrency 64] [--latency-ms 0 50]

On a shared machine, `nice -n -10` (as root) keeps other jobs from deciding the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import tiny

ENVS = Path(__file__).resolve().parents[1] / "tests" / "harness" / "envs"


def scenario(rollouts: int, concurrency: int, latency_ms: float) -> dict[str, float]:
    """One collection in this process; returns its figures."""
    os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = str(ENVS)
    from gymflow.core.config import EvalConfig, FaultSpec
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import policy_table
    from gymflow.simulated.local_server import LocalPolicyServer
    from gymflow.store.db import connect

    with tempfile.TemporaryDirectory(prefix="gymflow-bench-") as out:
        probe = resolve(EvalConfig(environment="ledger", out=out))
        repeats = -(-rollouts // len(probe.all_tasks))
        config = EvalConfig(environment="ledger", repeats=repeats, concurrency=concurrency, out=out)
        plan = resolve(config)
        table = {k: dataclasses.replace(e, skill=1.0) for k, e in policy_table(plan).items()}
        con = connect(plan.run_dir, create=True)
        register_run(con, plan, resume=False)
        faults = FaultSpec(latency_ms=latency_ms)
        with LocalPolicyServer(table, faults=faults) as server:
            stats_url = f"http://127.0.0.1:{server.port}/_gymflow/stats"
            before = httpx.get(stats_url).json()
            started, cpu_started = time.perf_counter(), time.process_time()
            done = run_collect(plan, plan.keys(), con, base_url=server.base_url)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            after = httpx.get(stats_url).json()
            server_rss = _peak_rss_kib(server._process.pid)
        calls, waiting, turns = con.execute(
            """SELECT (SELECT count(*) FROM model_calls), (SELECT sum(latency_s) FROM model_calls),
                      avg(num_turns) FROM rollouts"""
        ).fetchone()
        con.close()
    return {
        "rollouts": done.attempted,
        "failed": done.failed,
        "mean_turns": turns,
        "model_calls": calls,
        "seconds": elapsed,
        "rollouts_per_s": done.attempted / elapsed,
        "calls_per_s": (after["requests"] - before["requests"]) / elapsed,
        "mean_in_flight": (after["in_flight_seconds"] - before["in_flight_seconds"]) / elapsed,
        # Little's law on the client's side: calls outstanding, from their recorded latencies.
        "client_in_flight": waiting / elapsed,
        "peak_in_flight": after["peak_in_flight"],
        "client_cpu_ms_per_rollout": 1000 * cpu / max(1, done.attempted),
        "client_cpu_share": cpu / elapsed,
        "client_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "server_peak_rss_mib": server_rss / 1024,
    }


def _peak_rss_kib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--scenario", action="store_true", help=argparse.SUPPRESS)
    args = tiny.parse(parser, rollouts=100, latency_ms=[0.0])
    if args.scenario:
        figures = scenario(args.rollouts, args.concurrency, args.latency_ms[0])
        sys.stdout.write(json.dumps(figures) + "\n")
        return
    rows = []
    for latency in args.latency_ms:
        command = [
            sys.executable,
            __file__,
            "--scenario",
            f"--rollouts={args.rollouts}",
            f"--concurrency={args.concurrency}",
            f"--latency-ms={latency}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append((latency, json.loads(result.stdout.strip().splitlines()[-1])))
    print(
        f"tool_loop: ledger (3 model calls per rollout), {args.rollouts} rollouts, concurrency "
        f"{args.concurrency}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
        "(shared machine: noisy)"
    )
    print(
        f"{'latency':>8}{'rollouts/s':>12}{'calls/s':>10}{'turns':>7}{'failed':>8}"
        f"{'server in flight mean/peak':>28}{'client in flight':>18}"
        f"{'client RSS':>12}{'server RSS':>12}"
        f"{'client CPU/rollout':>20}{'client CPU busy':>17}"
    )
    for latency, f in rows:
        in_flight = f"{f['mean_in_flight']:.1f} / {f['peak_in_flight']}"
        print(
            f"{latency:>6g}ms{f['rollouts_per_s']:>12,.0f}{f['calls_per_s']:>10,.0f}"
            f"{f['mean_turns']:>7.2f}{f['failed']:>8}{in_flight:>28}{f['client_in_flight']:>18.1f}"
            f"{f['client_peak_rss_mib']:>9.0f}MiB{f['server_peak_rss_mib']:>9.0f}MiB"
            f"{f['client_cpu_ms_per_rollout']:>18.1f}ms{f['client_cpu_share']:>16.0%}"
        )


if __name__ == "__main__":
    main()
