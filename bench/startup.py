"""What a `gym` command costs as a user waits for it, each beside the same work without Prefect
(or without the CLI) in the same run, against its bound:

- `gym --help`, beside Python's own start-up (`python -c pass`): under 0.5 s;
- `gym eval profile RUN --json` on a small run, beside `profile()` of that run in a fresh
  process: under 1 s;
- `gym eval run` with Prefect's ephemeral server, beside the run's stages without Prefect: no
  bound (what a script or CI pays);
- `gym eval run` with the local server (`gym server --start`), beside the same stages: within
  1.5 s of them.

The run is `--benchmark arithmetic-smoke` (200 rollouts); `--large` runs 20,000 zero-latency
rollouts (arithmetic, 500 tasks x 40) against the local server and prints Prefect's share,
1 - (without Prefect) / (whole command), goal under 20%. "Without Prefect" runs the stages the
flow runs, in a fresh process that never imports Prefect: plan and register, the local policy
server, one collector over the same batches, compaction, health, profile, diagnosis and the
report. Every command runs as `python -m gymflow.cli` from `--src` (default: this checkout);
`--compare-src DIR` adds each `gym` figure from another checkout's `src` (before/after at the
same load). Modes alternate run by run, so each figure is taken at the same load as the others
(the load average is printed beside each). `--tiny` (seconds; what tests/test_bench_startup.py
runs): one run of each figure that needs no Prefect server, on a 10-rollout run.

    python bench/startup.py [--runs 3] [--large | --tiny] [--src DIR] [--compare-src DIR]
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
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
#: `gym` from the src on PYTHONPATH (the console script's entry point differs between checkouts)
GYM = [sys.executable, "-m", "gymflow.cli"]

SMALL = {"benchmark": "arithmetic-smoke"}
TINY = {"benchmark": "arithmetic-smoke", "limit": 10, "repeats": 1}
LARGE = {"environment": "arithmetic", "limit": 500, "repeats": 40}

HELP_BOUND_S = 0.5
PROFILE_BOUND_S = 1.0
RUN_OVER_BOUND_S = 1.5
LARGE_SHARE_BOUND = 0.20


def gym_args(workload: dict) -> list[str]:
    return [arg for key, value in workload.items() for arg in (f"--{key}", str(value))]


def run_stages(workload: dict, out: str) -> None:
    """The flow's stages as plain calls (this runs in a process of its own)."""
    from gymflow.analysis.run import analyse
    from gymflow.core.config import EvalConfig
    from gymflow.reports.render import write_report
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
    write_report(Path(out), analysis=analysis)
    assert "prefect" not in sys.modules, "the stages without Prefect imported it"


def profile_stage(run: str) -> None:
    """What `gym eval profile RUN --json` computes, without the CLI around it."""
    from gymflow.analysis.profile import profile
    from gymflow.store.db import connect

    with connect(Path(run), read_only=True) as con:
        result = profile(con)
    json.dumps(result.as_json(), default=str)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, env: dict, out: Path | None) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the command and the children it waited for (its policy
    server; an ephemeral Prefect server; not a local server it only talks to). `out`: a run
    folder the command must have stored rollouts in."""
    started, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    if out is not None:
        from gymflow.store.db import connect

        with connect(out, read_only=True) as con:
            stored = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
        if stored == 0:
            sys.exit(f"{' '.join(command)} stored nothing")
    return wall, cpu


@dataclass
class Mode:
    """One figure: a command (`{out}` in it is a fresh run folder), timed once per round."""

    name: str
    command: list[str]
    env: dict
    stores: bool = False  # the command writes a run into `{out}`
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def run(self, root: Path, out: Path) -> None:
        command = [part.replace("{out}", str(out)) for part in self.command]
        self.loads.append(os.getloadavg()[0])
        wall, cpu = timed(command, root, self.env, out if self.stores else None)
        self.walls.append(wall)
        self.cpus.append(cpu)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--large", action="store_true", help="20,000 rollouts: Prefect's share")
    sizes.add_argument("--tiny", action="store_true", help="seconds: no Prefect server, 1 run")
    parser.add_argument("--src", type=Path, default=SRC, help="the checkout's src to measure")
    parser.add_argument("--compare-src", type=Path, help="also run gym from this src folder")
    parser.add_argument("--stages", help=argparse.SUPPRESS)  # internal: JSON [workload, out]
    parser.add_argument("--profile-stage", help=argparse.SUPPRESS)  # internal: a run folder
    args = parser.parse_args()
    if args.stages:
        run_stages(*json.loads(args.stages))
        return
    if args.profile_stage:
        profile_stage(args.profile_stage)
        return
    runs = 1 if args.tiny else args.runs
    workload = LARGE if args.large else TINY if args.tiny else SMALL
    with tempfile.TemporaryDirectory(prefix="gymflow-startup-") as tmp:
        root = Path(tmp)
        home = root / "prefect-home"
        # an empty PREFECT_API_URL is unset; GYMFLOW_LOCAL_PREFECT=off: ephemeral unless started;
        # GYMFLOW_WARM=off: a checkout from before 2026-12-02 forks nothing
        base = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": "",
                "GYMFLOW_LOCAL_PREFECT": "off", "GYMFLOW_WARM": "off",
                "PYTHONPATH": str(args.src)}  # fmt: skip
        srcs = {"": base}
        if args.compare_src:
            srcs[f" ({args.compare_src})"] = {**base, "PYTHONPATH": str(args.compare_src)}
        # the run that `gym eval profile` reads, stored without Prefect
        small_run = root / "profiled"
        stages = [sys.executable, __file__, "--stages"]
        timed([*stages, json.dumps([SMALL if not args.tiny else TINY, str(small_run)])], root,
              base, small_run)  # fmt: skip
        modes: list[Mode] = []
        if not args.large:
            modes.append(Mode("python -c pass (floor)", [sys.executable, "-c", "pass"], base))
            modes += [Mode(f"gym --help{label}", [*GYM, "--help"], env)
                      for label, env in srcs.items()]  # fmt: skip
            bare_profile = [sys.executable, __file__, "--profile-stage", str(small_run)]
            modes.append(Mode("profile() without the CLI", bare_profile, base))
            profile = ["eval", "profile", str(small_run), "--json"]
            modes += [Mode(f"gym eval profile --json{label}", [*GYM, *profile], env)
                      for label, env in srcs.items()]  # fmt: skip
        run = ["eval", "run", *gym_args(workload), "--out", "{out}"]
        bare_run = [*stages, json.dumps([workload, "{out}"])]
        modes.append(Mode("run stages without Prefect", bare_run, base, stores=True))
        if not args.large and not args.tiny:
            # A PREFECT_HOME of its own: every gym command of the local server's adopts it.
            # The first run in a new PREFECT_HOME migrates its database: not a figure.
            ephemeral = {**base, "PREFECT_HOME": str(root / "prefect-home-ephemeral")}
            first = root / "first-ephemeral"
            timed([*GYM, *run[:-1], str(first)], root, ephemeral, first)
            modes += [Mode(f"gym eval run, ephemeral Prefect{label}", [*GYM, *run],
                           {**env, "PREFECT_HOME": ephemeral["PREFECT_HOME"]}, stores=True)
                      for label, env in srcs.items()]  # fmt: skip
        started = False
        try:
            if not args.tiny:
                server = subprocess.run([*GYM, "server", "--start"], env=base,
                                        capture_output=True, text=True)  # fmt: skip
                if server.returncode != 0:
                    sys.exit(f"gym server --start failed: {server.stdout}{server.stderr}")
                started = True
                api = json.loads((home / "gymflow-local-server.json").read_text())["prefect"]["url"]
                # as a user runs it: the command finds the local server's record; a checkout
                # whose record differs is given its address
                modes += [Mode(f"gym eval run, local server{label}", [*GYM, *run],
                               env if not label else {**env, "PREFECT_API_URL": api},
                               stores=True)
                          for label, env in srcs.items()]  # fmt: skip
            for i in range(runs):
                for m, mode in enumerate(modes):
                    mode.run(root, root / f"run-{i}-{m}")
        finally:
            if started:
                subprocess.run([*GYM, "server", "--stop"], env=base,
                               capture_output=True)  # fmt: skip
    report(modes, workload, runs, large=args.large)


def report(modes: list[Mode], workload: dict, runs: int, *, large: bool) -> None:
    by_name = {mode.name: mode for mode in modes}
    bare = by_name["run stages without Prefect"]
    print(f"gym eval run workload: {gym_args(workload)}; {runs} run(s) of each, alternating; "
          f"{os.cpu_count()} cores")  # fmt: skip
    print(f"{'':<58}{'median s':>9}{'best s':>8}{'CPU s':>7}{'load':>6}  bound")
    for mode in modes:
        name = mode.name
        if name.startswith("gym --help"):
            note = f"< {HELP_BOUND_S} s: {'met' if mode.wall < HELP_BOUND_S else 'NOT met'}"
        elif name.startswith("gym eval profile"):
            met = mode.wall < PROFILE_BOUND_S
            note = f"< {PROFILE_BOUND_S} s: {'met' if met else 'NOT met'}"
        elif name.startswith("gym eval run") and large:
            share = 1 - bare.wall / mode.wall
            met = share < LARGE_SHARE_BOUND
            note = f"Prefect's share {share:.0%} < {LARGE_SHARE_BOUND:.0%}: "
            note += "met" if met else "NOT met"
        elif name.startswith("gym eval run, local"):
            over = mode.wall - bare.wall
            met = over < RUN_OVER_BOUND_S
            note = f"{over:+.2f} s over the stages, < {RUN_OVER_BOUND_S} s: "
            note += "met" if met else "NOT met"
        elif name.startswith("gym eval run"):
            note = f"{mode.wall - bare.wall:+.2f} s over the stages (no bound)"
        else:
            note = "baseline"
        cpu, load = statistics.median(mode.cpus), statistics.median(mode.loads)
        print(f"{name:<58}{mode.wall:>9.2f}{min(mode.walls):>8.2f}{cpu:>7.2f}{load:>6.1f}  {note}")


if __name__ == "__main__":
    main()
