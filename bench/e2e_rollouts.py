"""gymflow end to end: rollouts/s at zero model latency (run, verify, store), beside the ceiling.

Two figures on the same workload, a benchmark written to a temporary folder (loaded through
GYMFLOW_ENVIRONMENTS_PATH) over an environment split, sized to `--rollouts`:
- collector: `gymflow.rollouts.collect.collect` in this process against a LocalPolicyServer (its
  own process), writing to a fresh DuckDB store; the pipeline a Prefect batch task runs.
- cli: the whole `gym eval run` as a subprocess (Prefect's ephemeral server start-up, the flow,
  health, profile, report), wall time and the peak RSS of the gym process.
Then the aiohttp ceiling of bench/ceiling.py, measured in the same run, and the ratio of model
calls/s to it (single-turn: one call per rollout). The goal is a collector ratio of at least 0.4.

    python bench/e2e_rollouts.py [--rollouts 20000] [--environment arithmetic --split full]
                                 [--skip-cli] [--profile out.html]
    # 3-turn tool loops: the ledger fixture, or the shipped multi-turn backoffice environment
    GYMFLOW_ENVIRONMENTS_PATH=tests/harness/envs python bench/e2e_rollouts.py \
        --environment ledger --split test
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import ceiling  # noqa: E402  (a sibling script, not a package)
import tiny  # noqa: E402  (bench/tiny.py: the --tiny flag every script takes)

BENCHMARK = "bench-e2e"
GYM = str(Path(sys.executable).parent / "gym")
#: Reused across runs so the CLI figure is not dominated by Prefect's first-time migrations.
PREFECT_HOME = Path.home() / ".cache" / "gymflow-bench" / "prefect-home"


@dataclass
class Figure:
    rollouts: int
    model_calls: int
    seconds: float
    peak_rss_mib: float
    #: CPU of this process only (not the policy server): steadier than wall time on a busy machine.
    cpu_s: float | None = None

    @property
    def rollouts_per_s(self) -> float:
        return self.rollouts / self.seconds

    @property
    def calls_per_s(self) -> float:
        return self.model_calls / self.seconds


def write_benchmark(root: Path, environment: str, split: str, rollouts: int) -> tuple[int, int]:
    """Write benchmarks/bench-e2e.yaml under `root`; return (tasks, repeats) covering `rollouts`
    exactly where the split allows (the most tasks that divide it: 20,480 rollouts of a
    2,000-task split are 1,280 x 16, so a latency run fills whole windows of 1,024), else as
    near as a config allows (at most MAX_REPEATS a task)."""
    from gymflow.core.config import MAX_REPEATS
    from gymflow.environments.registry import load_environment

    available = len(load_environment(environment).tasks(split))
    exact = (
        tasks
        for tasks in range(min(available, rollouts), 0, -1)
        if rollouts % tasks == 0 and rollouts // tasks <= MAX_REPEATS
    )
    limit = next(exact, min(available, rollouts))
    repeats = min(MAX_REPEATS, max(1, round(rollouts / limit)))
    (root / "benchmarks").mkdir(parents=True, exist_ok=True)
    spec = {
        "name": BENCHMARK,
        "description": "bench/e2e_rollouts.py workload",
        "environment": environment,
        "split": split,
        "limit": limit,
        "repeats": repeats,
        "sampling": {"temperature": 0.7, "top_p": 1.0, "max_output_tokens": 256, "seed": 0},
    }
    (root / "benchmarks" / f"{BENCHMARK}.yaml").write_text(yaml.safe_dump(spec))
    return limit, repeats


def count_calls(run_dir: Path) -> tuple[int, int]:
    from gymflow.store.db import connect

    con = connect(run_dir, read_only=True)
    try:
        return con.execute(
            "SELECT (SELECT count(*) FROM rollouts), (SELECT count(*) FROM model_calls)"
        ).fetchone()
    finally:
        con.close()


def run_collector(run_dir: Path, concurrency: int, profile_to: Path | None) -> Figure:
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import local_policy_server
    from gymflow.store.db import connect

    plan = resolve(EvalConfig(benchmark=BENCHMARK, out=str(run_dir), concurrency=concurrency))
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    keys = plan.keys()
    profiler = None
    if profile_to:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
    with local_policy_server(plan) as server:
        if profiler:
            profiler.start()
        started, cpu_started = time.perf_counter(), time.process_time()
        run_collect(plan, keys, con, base_url=server.base_url)
        seconds, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        if profiler:
            profiler.stop()
            profile_to.write_text(
                profiler.output_html() if profile_to.suffix == ".html" else profiler.output_text()
            )
    con.close()
    rollouts, calls = count_calls(run_dir)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Figure(rollouts, calls, seconds, peak, cpu_s)


def run_cli(run_dir: Path, concurrency: int) -> Figure | None:
    PREFECT_HOME.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GYMFLOW_ENVIRONMENTS_PATH": os.environ["GYMFLOW_ENVIRONMENTS_PATH"],
        "PREFECT_HOME": str(PREFECT_HOME),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # On a busy machine the ephemeral server can take longer than Prefect's default 20 s.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }
    command = [GYM, "eval", "run", "--benchmark", BENCHMARK, "--out", str(run_dir),
               "--concurrency", str(concurrency)]  # fmt: skip
    log = run_dir.parent / "cli.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak_kib = 0
        while process.poll() is None:
            peak_kib = max(peak_kib, high_water_kib(process.pid))
            time.sleep(0.1)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        print(f"gym eval run failed:\n{log.read_text(errors='replace')}", file=sys.stderr)
        return None
    rollouts, calls = count_calls(run_dir)
    return Figure(rollouts, calls, seconds, peak_kib / 1024)


def high_water_kib(pid: int) -> int:
    """The process's peak RSS so far (VmHWM). Polled, because a child's rusage after exec keeps
    the parent's peak from before the fork, which would report this script's memory."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--environment", default="arithmetic")
    parser.add_argument("--split", default="full")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--ceiling-seconds", type=float, default=5.0)
    parser.add_argument("--skip-cli", action="store_true", help="collector figure only")
    parser.add_argument(
        "--profile", type=Path, help="write a pyinstrument profile of the collector (.html or text)"
    )
    args = tiny.parse(parser, rollouts=200, ceiling_seconds=0.1)

    with tempfile.TemporaryDirectory(prefix="gymflow-bench-") as tmp:
        root = Path(tmp)
        # Prepended, so environments on the caller's path (e.g. tests/harness/envs) stay found.
        extra = os.environ.get("GYMFLOW_ENVIRONMENTS_PATH")
        os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = os.pathsep.join(
            [str(root / "envs"), *([extra] if extra else [])]
        )
        tasks, repeats = write_benchmark(root / "envs", args.environment, args.split, args.rollouts)
        collector = run_collector(root / "collector", args.concurrency, args.profile)
        cli = None if args.skip_cli else run_cli(root / "cli", args.concurrency)
        with ceiling.trivial_server() as base_url:
            rates = ceiling.measure(
                base_url,
                seconds=args.ceiling_seconds,
                concurrency=args.concurrency,
                clients=["aiohttp", "aiohttp on uvloop", "gymflow model client on uvloop"],
            )

    aio = rates["aiohttp"]
    print(
        f"gymflow end to end: {args.environment}/{args.split}, {tasks} tasks x {repeats} repeats, "
        f"concurrency {args.concurrency}, zero model latency, {os.cpu_count()} cores "
        "(shared machine: noisy)"
    )
    rows = []
    for name, fig in (("collector (collect+verify+store)", collector), ("gym eval run", cli)):
        if fig is not None:
            cpu = f"{1000 * fig.cpu_s / fig.rollouts:.3f}" if fig.cpu_s else "-"
            rows.append(
                [name, f"{fig.rollouts:,}", f"{fig.model_calls:,}", f"{fig.seconds:.2f}",
                 f"{fig.rollouts_per_s:,.0f}", f"{fig.calls_per_s:,.0f}",
                 f"{fig.calls_per_s / aio:.2f}", f"{fig.peak_rss_mib:,.0f}", cpu]
            )  # fmt: skip
    for name, rate in rates.items():
        ratio = f"{rate / aio:.2f}"
        rows.append([f"ceiling: {name}", "", "", "", "", f"{rate:,.0f}", ratio, "", ""])
    ceiling.print_table(
        ["measure", "rollouts", "calls", "seconds", "rollouts/s", "calls/s", "÷ aiohttp",
         "peak RSS MiB", "CPU ms/rollout"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
