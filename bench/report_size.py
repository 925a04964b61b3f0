"""Size and load time of the HTML report of a 1,000-task x 8-repeat run.

Collects the run for real (`gym eval run` against the local simulated policy, through Prefect),
renders the report, then opens it in headless Chromium over the DevTools protocol several times
and reports the page's own navigation-start-to-load-event time. The target: under 5 MB and under
2 s. Figures on a shared machine are noisy: read the median, not the best.

    python bench/report_size.py                      # arithmetic, 1000 tasks x 8 repeats
    python bench/report_size.py --benchmark-env backoffice --tasks 240   # multi-turn tool use
    python bench/report_size.py --keep /tmp/report-bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the DevTools client lives with the browser tests

import tiny  # noqa: E402  (bench/tiny.py: the --tiny flag every script takes)

from tests.reports.browser import chromium, visit  # noqa: E402

BENCHMARK = """\
name: report-bench
description: Report size benchmark.
environment: {environment}
split: {split}
limit: {tasks}
repeats: {repeats}
sampling: {{temperature: 0.7, top_p: 1.0, max_output_tokens: 256, seed: 0}}
"""
SPLITS = {"arithmetic": "full", "backoffice": "test"}


def collect(work: Path, environment: str, tasks: int, repeats: int) -> tuple[Path, float]:
    (work / "benchmarks").mkdir(parents=True, exist_ok=True)
    (work / "benchmarks" / "report-bench.yaml").write_text(
        BENCHMARK.format(
            environment=environment, split=SPLITS[environment], tasks=tasks, repeats=repeats
        )
    )
    (work / "prefect").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "GYMFLOW_ENVIRONMENTS_PATH": str(work),
        "PREFECT_HOME": str(work / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }
    run_dir = work / "run"
    started = time.perf_counter()
    gym = str(Path(sys.executable).parent / "gym")
    subprocess.run(
        [gym, "eval", "run", "--benchmark", "report-bench", "--out", str(run_dir)],
        cwd=work,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return run_dir, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark-env", default="arithmetic", choices=sorted(SPLITS))
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--loads", type=int, default=7, help="page loads to time")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = tiny.parse(parser, tasks=20, repeats=2, loads=1)

    work = args.keep or Path(tempfile.mkdtemp(prefix="gymflow-report-bench-"))
    try:
        run_dir, collect_s = collect(work, args.benchmark_env, args.tasks, args.repeats)
        from gymflow.reports.render import export_path, write_report
        from gymflow.store.db import connect

        con = connect(run_dir, read_only=True)
        rollouts = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
        con.close()
        started = time.perf_counter()
        report = write_report(run_dir, out=work / "report.html").path
        render_s = time.perf_counter() - started
        export = export_path(report)
        binary = shutil.which("chromium") or "/usr/bin/chromium"
        with chromium(binary) as tools:
            visits = [visit(tools, report) for _ in range(args.loads)]
        loads = [v.load_ms for v in visits]
        walls = [1000 * v.wall_s for v in visits]
        size = report.stat().st_size
        print(
            f"run: {args.benchmark_env}, {args.tasks} tasks x {args.repeats} repeats, "
            f"{rollouts} rollouts (collected in {collect_s:.1f} s through gym eval run)"
        )
        print(f"report: {report}")
        print(f"  size: {size / 1e6:.2f} MB ({size} bytes), target < 5 MB")
        if export.exists():
            print(
                f"  trajectory export beside it: {export.stat().st_size / 1e6:.2f} MB, "
                f"{sum(1 for _ in export.open())} trajectories"
            )
        print(f"  render (write_report, all analysis included): {render_s:.2f} s")
        print(
            f"  Chromium load, navigation start to load event, {len(loads)} loads: "
            f"median {statistics.median(loads):.0f} ms, min {min(loads):.0f}, "
            f"max {max(loads):.0f}; target < 2000 ms"
        )
        print(
            f"  seen from the DevTools client (navigate to load event): "
            f"median {statistics.median(walls):.0f} ms"
        )
        requests = {url for v in visits for url in v.requests}
        print(f"  requests made by the page: {sorted(requests)}")
        print("  (shared 2-core machine with other jobs running: figures are noisy)")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
