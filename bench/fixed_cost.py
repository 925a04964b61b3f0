"""Where a small `gym eval run`'s fixed cost goes, stage by stage: wall and CPU seconds of each
stage of one command, from the interpreter's start to its exit, against the local Prefect server
(`gym server --start`), for this checkout and, interleaved in the same minutes, another
(`--compare-src`, e.g. `git worktree`s of older commits).

Each run is `python -m gymflow.cli eval run --benchmark arithmetic-smoke` (200 rollouts on the
simulated policy) in a child process that wraps the stages' functions where their callers look
them up and prints, for each stage, when it began and ended (wall) and the process's CPU seconds
(every thread; the policy server is a process of its own and not counted). Prefect and the flow
modules are imported first, as a stage of their own, so a stage never pays for an import another
would have paid: the sum of the stages is the command's wall time, but the policy server's
start-up no longer overlaps the import (`launched_early`). "prefect: flow run start" is from the
flow call to the flow's first line, "prefect: flow run end" from its last line to the call's
return, "exit" from the CLI's return to the process's end. A stage a checkout lacks shows "-".

    python bench/fixed_cost.py [--runs 5] [--compare-src /tmp/old/src ...] [--limit N --repeats R]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny

SRC = Path(__file__).resolve().parents[1] / "src"

#: (stage, module, attribute): wrapped in `module`, where its caller looks it up at call time.
PLAN = "config and plan (build_config, check_before_run)"
CALLS = (
    (PLAN, "gymflow.cli.evaluate", "build_config"),
    (PLAN, "gymflow.cli.evaluate", "check_before_run"),
    ("local server lookup (prefect_for_run)", "gymflow.cli.evaluate", "prefect_for_run"),
    ("the flow's plan (plan_of) and tags (tag_run)", "gymflow.flows.eval_run", "plan_of"),
    ("the flow's plan (plan_of) and tags (tag_run)", "gymflow.flows.eval_run", "tag_run"),
    ("register the run (prepare_run)", "gymflow.flows.eval_shard", "prepare_run"),
    (
        "collect (collect_plan: the three above, the batches)",
        "gymflow.flows.eval_run",
        "collect_plan",
    ),
    ("compact the store", "gymflow.flows.eval_run", "compact"),
    ("analyse: health, profile, diagnosis (task)", "gymflow.flows.eval_run", "analyse_store"),
    ("report (task)", "gymflow.flows.eval_run", "render_report"),
    ("artifacts (publish_results)", "gymflow.flows.eval_run", "publish_results"),
    ("run log (run_log.results)", "gymflow.flows.run_log", "results"),
    ("headline (print_headline)", "gymflow.cli.evaluate", "print_headline"),
)
#: (stage, module, attribute): context managers; their entry and exit are timed apart.
CONTEXTS = (
    ("policy server launch (launched_early)", "gymflow.cli.evaluate", "launched_early"),
    ("policy server ready (model_endpoint)", "gymflow.flows.eval_shard", "model_endpoint"),
    ("progress artifact (RunProgress)", "gymflow.flows.eval_run", "RunProgress"),
    ("collector open and close (Collector)", "gymflow.flows.eval_shard", "Collector"),
)
FLOW_START, FLOW_END = "prefect: flow run start", "prefect: flow run end"


def child(argv: list[str]) -> None:
    """Run `gym ARGV` here with the stages wrapped; print the marks as JSON on the last line."""
    import importlib

    marks: list[tuple[str, float, float, float, float]] = []

    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def mark(stage: str, begun: tuple[float, float]) -> None:
        ended = now()
        marks.append((stage, begun[0], ended[0], begun[1], ended[1]))

    with open(f"/proc/{os.getpid()}/stat") as stat:  # the interpreter's start, in clock ticks
        started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as uptime:
        since_start = float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
    begun = now()
    marks.append(("python start-up", begun[0] - since_start, begun[0], 0.0, begun[1]))
    import gymflow.cli

    mark("import gymflow's CLI", begun)
    begun = now()
    with contextlib.suppress(ImportError):
        import gymflow.flows.eval_run  # what `gym eval run` imports as it starts
        import gymflow.flows.eval_shard
    mark("import Prefect and the flows", begun)

    def timed_call(stage: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            begun = now()
            try:
                return fn(*args, **kwargs)
            finally:
                mark(stage, begun)

        return wrapper

    def timed_context(stage: str, make):
        @contextlib.contextmanager
        def wrapper(*args, **kwargs):
            begun = now()
            with make(*args, **kwargs) as value:
                mark(stage, begun)
                inside = now()
                try:
                    yield value
                finally:
                    mark("(inside) " + stage, inside)
                    begun = now()
            mark(stage, begun)

        return wrapper

    for stage, module, name in CALLS:
        target = importlib.import_module(module)
        if hasattr(target, name):
            setattr(target, name, timed_call(stage, getattr(target, name)))
    for stage, module, name in CONTEXTS:
        target = importlib.import_module(module)
        if hasattr(target, name):
            setattr(target, name, timed_context(stage, getattr(target, name)))
    # the flow: Prefect's share is the time from its call to its body and back
    evaluate = importlib.import_module("gymflow.cli.evaluate")
    eval_run = importlib.import_module("gymflow.flows.eval_run")
    # the flow body's first call (`run_evaluation`; `_dated` before it existed) marks its start;
    # the end of the last stage timed inside it marks its end
    first = next(name for name in ("run_evaluation", "_dated") if hasattr(eval_run, name))
    inner = getattr(eval_run, first)
    flow_edges: dict[str, tuple[float, float]] = {}

    @functools.wraps(inner)
    def flow_body(*args, **kwargs):
        mark(FLOW_START, flow_edges["called"])
        flow_edges["marks"] = len(marks)
        return inner(*args, **kwargs)

    setattr(eval_run, first, flow_body)
    run_loop = evaluate.run_loop

    @functools.wraps(run_loop)
    def timed_run_loop(*args, **kwargs):
        flow_edges["called"] = now()
        try:
            return run_loop(*args, **kwargs)
        finally:
            inside = marks[flow_edges.get("marks", len(marks)) :]
            if inside:
                last = max(inside, key=lambda m: m[2])
                mark(FLOW_END, (last[2], last[4]))

    evaluate.run_loop = timed_run_loop
    sys.argv = [__file__, *argv]
    begun = now()
    try:
        gymflow.cli.main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        mark("(the whole CLI)", begun)
        print("\nFIXED-COST " + json.dumps({"marks": marks, "end": time.perf_counter()}))
        sys.stdout.flush()
    # as the command itself ends, where the checkout's CLI ends it its own way
    ending = sys.modules.get("gymflow.cli.ending")
    if ending is not None:
        ending.exit_process(0)


def one_run(src: Path, root: Path, out: Path, workload: list[str], api: str) -> dict:
    """Stage -> (wall s, CPU s) of one command; 'exit' is measured from outside. `api`: the
    local server's address. Every checkout is given it: the child imports Prefect before the
    CLI would adopt the server's record, and Prefect reads PREFECT_API_URL once, as it is
    imported; unset then, the flow ran against an in-process ephemeral API on the same
    database (2 CPU s more, and stalls of 20 s under load, in whichever checkout ran first)."""
    env = {**os.environ, "PYTHONPATH": str(src), "GYMFLOW_WARM": "off", "PREFECT_API_URL": api}
    command = [sys.executable, __file__, "--child", json.dumps(
        ["eval", "run", *workload, "--out", str(out)])]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    total = time.perf_counter() - started
    if result.returncode != 0 or "FIXED-COST " not in result.stdout:
        sys.exit(f"{src}: gym eval run failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    found = json.loads(result.stdout.rsplit("FIXED-COST ", 1)[1])
    stages: dict[str, list[float]] = {}
    for stage, wall0, wall1, cpu0, cpu1 in found["marks"]:
        wall, cpu = stages.setdefault(stage, [0.0, 0.0])
        stages[stage] = [wall + wall1 - wall0, cpu + cpu1 - cpu0]
    whole = stages["(the whole CLI)"][0] + stages["import gymflow's CLI"][0]
    whole += stages["python start-up"][0] + stages["import Prefect and the flows"][0]
    stages["exit (interpreter shutdown, from outside)"] = [max(0.0, total - whole), 0.0]
    stages["(the whole command, from outside)"] = [total, 0.0]
    return {stage: (wall, cpu) for stage, (wall, cpu) in stages.items()}


def local_api() -> str:
    """The Prefect API the runs use: PREFECT_API_URL when set, else the address of the local
    Prefect server of this PREFECT_HOME (`gym server --start`)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
    record = home / "gymflow-local-server.json"
    if not record.exists():
        sys.exit(f"no local Prefect server ({record}): start one with `gym server --start`")
    return json.loads(record.read_text())["prefect"]["url"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--src", type=Path, default=SRC)
    parser.add_argument("--compare-src", type=Path, nargs="+", default=[])
    parser.add_argument("--limit", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = tiny.parse(parser, runs=1, limit=5, repeats=1)
    if args.child:
        child(json.loads(args.child))
        return
    workload = ["--benchmark", "arithmetic-smoke"]
    workload += ["--limit", str(args.limit)] if args.limit else []
    workload += ["--repeats", str(args.repeats)] if args.repeats else []
    srcs = [args.src, *args.compare_src]
    results: dict[Path, list[dict[str, tuple[float, float]]]] = {src: [] for src in srcs}
    loads = []
    api = local_api()
    with tempfile.TemporaryDirectory(prefix="gymflow-fixed-cost-") as tmp:
        root = Path(tmp)
        for i in range(args.runs):
            for j, src in enumerate(srcs):
                loads.append(os.getloadavg()[0])
                results[src].append(one_run(src, root, root / f"run-{i}-{j}", workload, api))
    report(results, workload, loads)


def report(results: dict[Path, list[dict]], workload: list[str], loads: list[float]) -> None:
    order: list[str] = []
    for runs in results.values():
        for run in runs:
            order += [stage for stage in run if stage not in order]
    order = [s for s in order if not s.startswith("(")] + [s for s in order if s.startswith("(")]
    print(f"gym eval run {' '.join(workload)}, local Prefect server; {len(loads)} commands, "
          f"load {min(loads):.1f}-{max(loads):.1f}; median wall s / median CPU s "
          "[wall min-max]")  # fmt: skip
    header = "".join(f" | {str(src)[-28:]:>30}" for src in results)
    print(f"{'stage':<52}{header}")
    for stage in order:
        cells = ""
        for runs in results.values():
            values = [run[stage] for run in runs if stage in run]
            if not values:
                cells += f" | {'-':>30}"
                continue
            walls, cpus = [v[0] for v in values], [v[1] for v in values]
            cell = f"{statistics.median(walls):.2f} / {statistics.median(cpus):.2f} "
            cell += f"[{min(walls):.2f}-{max(walls):.2f}]"
            cells += f" | {cell:>30}"
        print(f"{stage[:52]:<52}{cells}")


if __name__ == "__main__":
    main()
