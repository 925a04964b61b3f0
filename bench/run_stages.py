"""The in-process stages of a small run that issue 20's trimming changed, each timed on its own
(a whole command's wall time swings by seconds on a shared machine; these do not):

- the report's first render in a fresh process (Jinja compiles or loads its templates) beside a
  second one in the same process (templates in memory),
- the health checks over a stored run (CPU: DuckDB's threads included),
- the analysis task's cache key (before: a store open and a query),
- the local policy server's readiness wait and its stop (before: 20 ms polls, and a 0.2 s wait
  for its process to end).

Run it once per checkout on the same stored run, alternating, and compare:

    PYTHONPATH=src python bench/run_stages.py runs/smoke --repeats 3
    PYTHONPATH=/tmp/base/src python bench/run_stages.py runs/smoke --repeats 3

Without a run folder it first stores one (`gym eval run --benchmark arithmetic-smoke`) in a
temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import tiny


def stages(run_dir: Path) -> dict[str, float]:
    """One fresh process's figures, in seconds."""
    from gymflow.analysis.health import health
    from gymflow.analysis.run import analyse
    from gymflow.reports.sections import DEFAULT_LIMITS
    from gymflow.simulated.local_server import LocalPolicyServer
    from gymflow.steps.analysis import _store_key
    from gymflow.store.db import connect

    found: dict[str, float] = {}
    with connect(run_dir, read_only=True) as con:
        analysis = analyse(con, top=DEFAULT_LIMITS.diagnosed_tasks, excerpt=0)
        cpu = []
        for _ in range(5):
            started = time.process_time()
            health(con)
            cpu.append(time.process_time() - started)
        found["health CPU"] = statistics.median(cpu)
    from gymflow.reports.render import write_report

    for name in ("first report render", "second, same process"):
        started = time.perf_counter()
        write_report(run_dir, analysis=analysis, out=run_dir / "stages-report.html")
        found[name] = time.perf_counter() - started
    context = SimpleNamespace(task=SimpleNamespace(name="analyse-run"))
    started = time.perf_counter()
    _store_key(context, {"run_dir": str(run_dir)})
    found["analysis cache key"] = time.perf_counter() - started
    server = LocalPolicyServer({}).launch()
    started = time.perf_counter()
    server.wait_ready()
    found["policy server launch to ready"] = time.perf_counter() - started
    started = time.perf_counter()
    server.stop()
    found["policy server stop"] = time.perf_counter() - started
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dir", type=Path, nargs="?", help="a stored run (gym eval run --out DIR)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes to take")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # internal
    args = tiny.parse(parser, repeats=1)
    if args.once:
        print(json.dumps(stages(args.run_dir.resolve())))
        return
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or _stored_run(Path(scratch))
        runs = [_once(run_dir) for _ in range(args.repeats)]
    print(f"{args.repeats} fresh processes, load {os.getloadavg()[0]:.1f}; median (best) seconds")
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"{name:<32}{statistics.median(values):>8.3f} ({min(values):.3f})")


def _stored_run(scratch: Path) -> Path:
    gym = Path(sys.executable).parent / "gym"
    run_dir = scratch / "smoke"
    subprocess.run(
        [str(gym), "eval", "run", "--benchmark", "arithmetic-smoke", "--out", str(run_dir)],
        check=True,
        capture_output=True,
    )
    return run_dir


def _once(run_dir: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, str(run_dir), "--once"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    return json.loads(done.stdout)


if __name__ == "__main__":
    main()
