"""How much of a run's wall time is orchestration (Prefect) and how much is rollouts.

20,000 rollouts (arithmetic, 500 tasks x 40 repeats) at zero model latency through the eval-run
flow with 1, 4 and 16 local shards, against a Prefect server started for the benchmark (so every
task and flow run is recorded, as on a team server; PREFECT_API_URL's when one is given, as
tests/bench/test_tiny.py gives the suite's). The domain functions the flow's tasks call are
timed from inside: `collect` (rollouts), planning and run registration, the shard merge, the local
policy server start, and health / profile / diagnose / report. Orchestration is the flow's wall
time covered by none of them: flow and task run bookkeeping, subflow starts, result handling,
artifacts, thread hand-offs. Intervals are unions, so concurrent shards are not double counted.

    python bench/orchestration.py [--shards 1 4 16] [--tasks 500] [--repeats 40]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tiny

import gymflow.flows.eval_run as eval_run_module
import gymflow.flows.eval_shard as eval_shard_module
import gymflow.steps.analysis as analysis_tasks
import gymflow.steps.rollouts as rollout_tasks
import gymflow.steps.shards as shard_tasks
from gymflow.core.config import EvalConfig
from gymflow.flows.parameters import UNSHARDED, ScaleOptions
from gymflow.rollouts.collect import Collector


class Timeline:
    """(category, start, end) intervals recorded from any thread."""

    def __init__(self) -> None:
        self.intervals: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()

    def add(self, category: str, start: float, end: float) -> None:
        with self.lock:
            self.intervals.append((category, start, end))

    def union(self, categories: set[str] | None = None) -> float:
        spans = sorted(
            (s, e) for c, s, e in self.intervals if categories is None or c in categories
        )
        total, current_start, current_end = 0.0, None, None
        for start, end in spans:
            if current_end is None or start > current_end:
                if current_end is not None:
                    total += current_end - current_start
                current_start, current_end = start, end
            else:
                current_end = max(current_end, end)
        if current_end is not None:
            total += current_end - current_start
        return total


TIMELINE = Timeline()


def timed(category: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMELINE.add(category, start, time.perf_counter())

    return wrapper


def timed_entry(category: str, cm: Callable) -> Callable:
    """Time only the entry of a context manager (starting the local policy server)."""

    @contextmanager
    def wrapper(*args: Any, **kwargs: Any):
        start = time.perf_counter()
        with cm(*args, **kwargs) as value:
            TIMELINE.add(category, start, time.perf_counter())
            yield value

    return wrapper


def instrument() -> None:
    Collector.run = timed("rollouts", Collector.run)
    eval_run_module.plan_of = timed("plan", eval_run_module.plan_of)
    eval_shard_module.plan_of = timed("plan", eval_shard_module.plan_of)
    eval_shard_module.prepare_run = timed("plan", eval_shard_module.prepare_run)
    rollout_tasks.missing_keys = timed("plan", rollout_tasks.missing_keys)
    eval_run_module.check_destination = timed("plan", eval_run_module.check_destination)
    shard_tasks.merge_shards = timed("merge", shard_tasks.merge_shards)
    shard_tasks.shard_progress = timed("merge", shard_tasks.shard_progress)
    # the domain functions the analysis tasks call, as the tasks module holds them
    for name in ("analyse", "write_report"):
        setattr(analysis_tasks, name, timed("analysis", getattr(analysis_tasks, name)))
    eval_run_module.model_endpoint = timed_entry("model server", eval_run_module.model_endpoint)
    eval_shard_module.model_endpoint = timed_entry("model server", eval_shard_module.model_endpoint)


def run_once(root: Path, shards: int, tasks: int, repeats: int) -> dict[str, float]:
    config = EvalConfig(
        environment="arithmetic", limit=tasks, repeats=repeats, out=str(root / f"run-{shards}")
    )
    scale = UNSHARDED if shards == 1 else ScaleOptions(shards=shards)
    TIMELINE.intervals.clear()
    start = time.perf_counter()
    result = eval_run_module.evaluation_loop(config, scale=scale)
    wall = time.perf_counter() - start
    rollouts = result.analysis.profile.coverage.expected
    domain = TIMELINE.union()
    figures = {
        "shards": shards,
        "rollouts": rollouts,
        "wall_s": wall,
        "collect_s": TIMELINE.union({"rollouts"}),
        "plan_s": TIMELINE.union({"plan"}),
        "server_s": TIMELINE.union({"model server"}),
        "merge_s": TIMELINE.union({"merge"}),
        "analysis_s": TIMELINE.union({"analysis"}),
        "orchestration_s": wall - domain,
    }
    figures["orchestration_share"] = figures["orchestration_s"] / wall
    figures["collect_share"] = figures["collect_s"] / wall
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=40)
    args = tiny.parse(parser, shards=[1, 2], tasks=20, repeats=2)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect.testing.utilities import prefect_test_harness

    instrument()
    rows = []
    # a server given (PREFECT_API_URL) is used as it is: the harness would start another
    given = os.environ.get("PREFECT_API_URL")
    with (
        tempfile.TemporaryDirectory(prefix="gymflow-bench-") as tmp,
        contextlib.nullcontext() if given else prefect_test_harness(server_startup_timeout=120),
    ):
        # The first flow run in a process pays one-off costs (client, flow registration,
        # imports inside Prefect): a small warm-up run keeps them out of the figures. A tiny
        # run's figures mean nothing, and its first row runs the same flow.
        if not args.tiny:
            run_once(Path(tmp) / "warm-up", 1, 10, 1)
        for shards in args.shards:
            rows.append(run_once(Path(tmp), shards, args.tasks, args.repeats))
            print(f"shards={shards}: {rows[-1]}", flush=True)
    header = (
        f"{'shards':>6} {'rollouts':>8} {'wall s':>7} {'collect s':>9} {'plan s':>6} "
        f"{'server s':>8} {'merge s':>7} {'analysis s':>10} {'orch. s':>7} {'orch. %':>7} "
        f"{'collect %':>9}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['shards']:>6} {r['rollouts']:>8} {r['wall_s']:>7.1f} {r['collect_s']:>9.1f} "
            f"{r['plan_s']:>6.1f} {r['server_s']:>8.1f} {r['merge_s']:>7.1f} "
            f"{r['analysis_s']:>10.1f} {r['orchestration_s']:>7.1f} "
            f"{100 * r['orchestration_share']:>6.1f}% {100 * r['collect_share']:>8.1f}%"
        )
    print(
        "collect s / plan s / ...: wall-clock unions of the time inside those functions; "
        "orch. s: the flow's wall time inside none of them (Prefect). One noisy shared machine."
    )


if __name__ == "__main__":
    main()
