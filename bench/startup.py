"""A run's wall time as a user waits for it (`gym eval run`, the whole command), beside the same
stages without Prefect, at two sizes:

- small: `--benchmark arithmetic-smoke` (200 rollouts), in Prefect's ephemeral mode and against
  the local server (`gym server --start`), forked from the warm process beside it (as a user's
  commands run) and without it (GYMFLOW_WARM=off); goal: under 3 s wall on a quiet 2-core
  machine.
- large (`--large`): 20,000 zero-latency rollouts (arithmetic, 500 tasks x 40) against the local
  server; goal: Prefect's share, 1 - (without Prefect) / (whole command), under 20%.

"Without Prefect" runs the stages the flow runs, in a fresh process that never imports Prefect:
plan and register, the local policy server, one collector over the same batches, compaction,
health, profile, diagnosis and the report. Modes alternate run by run, so each figure is taken
at the same load as the others (the load average is printed beside each). `--compare-src DIR`
adds the whole command run from another checkout's `src` (before/after in the same minutes).

    python bench/startup.py [--runs 3] [--large] [--compare-src /tmp/base/src]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import tiny

GYM = str(Path(sys.executable).parent / "gym")
SRC = Path(__file__).resolve().parents[1] / "src"

SMALL = {"benchmark": "arithmetic-smoke"}
LARGE = {"environment": "arithmetic", "limit": 500, "repeats": 40}


def gym_args(workload: dict) -> list[str]:
    return [arg for key, value in workload.items() for arg in (f"--{key}", str(value))]


def without_prefect(workload: dict, out: str) -> None:
    """The flow's stages as plain calls (this runs in a process of its own)."""
    started = time.perf_counter()
    from gymflow.analysis.run import analyse
    from gymflow.config import EvalConfig
    from gymflow.reports.render import write_run_report
    from gymflow.reports.sections import DEFAULT_LIMITS
    from gymflow.rollouts.collect import Collector
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import model_endpoint
    from gymflow.store.compact import compact
    from gymflow.store.db import connect, held
    from gymflow.store.merge import check_destination
    from gymflow.store.runs import missing_keys

    plan = resolve(EvalConfig.model_validate({**workload, "out": out}))
    check_destination(out, plan.run_id, resume=False, benchmark_version=plan.benchmark_version)
    with connect(plan.run_dir, create=True) as con:
        register_run(con, plan, resume=False)
    keys, size = plan.keys(), plan.config.batch_size
    with (
        held(plan.run_dir),
        model_endpoint(plan) as url,
        closing(connect(plan.run_dir)) as con,
        Collector(plan, con, base_url=url) as collector,
    ):
        for start in range(0, len(keys), size):
            collector.run(missing_keys(con, plan.run_id, keys[start : start + size]))
    compact(out)
    with connect(out, read_only=True) as con:
        analysis = analyse(con, top=DEFAULT_LIMITS.diagnosed_tasks, excerpt=0)
    write_run_report(Path(out), analysis=analysis)
    assert "prefect" not in sys.modules, "the stages without Prefect imported it"
    print(json.dumps({"seconds": time.perf_counter() - started}))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, env: dict, out: Path) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the command and the children it waited for (its policy
    server; an ephemeral Prefect server; not a local server it only talks to)."""
    started, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    from gymflow.store.db import connect

    with connect(out, read_only=True) as con:
        stored = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
    if stored == 0:
        sys.exit(f"{' '.join(command)} stored nothing")
    return wall, cpu


def _wait_for_warm(home: Path, timeout_s: float = 180) -> None:
    """Until the warm process `gym server --start` started serves (it imports in the
    background)."""
    deadline = time.monotonic() + timeout_s
    while not (home / "gymflow-warm.json").exists():
        if time.monotonic() > deadline:
            sys.exit(f"no warm process after {timeout_s} s: {home / 'gymflow-warm.log'}")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--large", action="store_true", help="20,000 rollouts: Prefect's share")
    parser.add_argument("--compare-src", type=Path, help="also run gym from this src folder")
    parser.add_argument("--stages", help=argparse.SUPPRESS)  # internal: JSON [workload, out]
    args = tiny.parse(parser, runs=1)
    if args.stages:
        without_prefect(*json.loads(args.stages))
        return
    workload = LARGE if args.large else SMALL
    with tempfile.TemporaryDirectory(prefix="gymflow-startup-") as tmp:
        root = Path(tmp)
        home = root / "prefect-home"
        # an empty PREFECT_API_URL is unset; GYMFLOW_LOCAL_PREFECT=off: ephemeral unless started
        base = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": "",
                "GYMFLOW_LOCAL_PREFECT": "off", "PYTHONPATH": str(SRC)}  # fmt: skip
        other = {**base, "PYTHONPATH": str(args.compare_src)} if args.compare_src else None
        modes: list[tuple[str, list[str], dict]] = []
        if not args.large:
            # A PREFECT_HOME of its own: every gym command of the local server's adopts it.
            # The first run in a new PREFECT_HOME migrates its database: not a figure.
            ephemeral = {**base, "PREFECT_HOME": str(root / "prefect-home-ephemeral")}
            warm = root / "warm"
            timed([GYM, "eval", "run", *gym_args(SMALL), "--out", str(warm)], root, ephemeral,
                  warm)  # fmt: skip
            modes.append(("gym eval run, ephemeral Prefect", ["eval", "run"], ephemeral))
        server = subprocess.run([GYM, "server", "--start"], env=base, capture_output=True)
        if server.returncode != 0:
            sys.exit(f"gym server --start failed: {server.stderr.decode()}")
        try:
            local = json.loads((home / "gymflow-local-server.json").read_text())["api_url"]
            _wait_for_warm(home)
            # as a user runs it: the command finds the local server (and the warm process)
            modes.append(("gym eval run, local server, warm process", ["eval", "run"], base))
            cold = {**base, "GYMFLOW_WARM": "off"}
            modes.append(("gym eval run, local server, no warm process", ["eval", "run"], cold))
            if other:
                modes.append((f"  same, {args.compare_src}", ["eval", "run"], {**other,
                              "PREFECT_API_URL": local}))  # fmt: skip
            modes.append(("same stages without Prefect", [], base))
            walls: dict[str, list[float]] = {name: [] for name, _, _ in modes}
            cpus: dict[str, list[float]] = {name: [] for name, _, _ in modes}
            loads: dict[str, list[float]] = {name: [] for name, _, _ in modes}
            for i in range(args.runs):
                for m, (name, command, env) in enumerate(modes):
                    out = root / f"run-{i}-{m}"
                    if command:
                        full = [GYM, *command, *gym_args(workload), "--out", str(out)]
                    else:
                        stages = json.dumps([workload, str(out)])
                        full = [sys.executable, __file__, "--stages", stages]
                    loads[name].append(os.getloadavg()[0])
                    wall, cpu = timed(full, root, env, out)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        finally:
            subprocess.run([GYM, "server", "--stop"], env=base, capture_output=True)
    size = "20,000 zero-latency rollouts" if args.large else "200 rollouts (arithmetic-smoke)"
    print(f"{size}, {args.runs} runs of each, alternating; {os.cpu_count()} cores")
    print(f"{'':<46}{'median s':>9}{'best s':>8}{'CPU s':>7}{'load':>6}  bound / baseline")
    bare = statistics.median(walls["same stages without Prefect"])
    bare_cpu = statistics.median(cpus["same stages without Prefect"])
    for name, _, _ in modes:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        # a forked command's CPU is the warm process's child's, not the caller's: not measured
        forked = "warm process" in name and "no warm" not in name
        cpu_text = "-" if forked else f"{cpu:.2f}"
        if "without Prefect" in name:
            note = "baseline"
        elif args.large:
            note = f"Prefect's share {1 - bare / wall:.0%} of wall"
            if not forked:
                note += f", {1 - bare_cpu / cpu:.0%} of this process's CPU"
            note += " (goal < 20%)"
        else:
            note = f"goal < 3 s on a quiet machine; {wall - bare:+.2f} s against the baseline"
        load = statistics.median(loads[name])
        print(f"{name:<46}{wall:>9.2f}{min(walls[name]):>8.2f}{cpu_text:>7}{load:>6.1f}  {note}")


if __name__ == "__main__":
    main()
