"""Seconds per rollout of each agent on the shipped workspace tasks (`workspace-basics`), through
`gym eval run` as a user types it, beside the sandbox's own floor measured in the same run.

For each agent (the `command` harness's `oracle`, `nothing` and `tool_loop`; `tool_loop` answered
by gymflow's simulated policy, or by the model at `--model-url`, e.g. SmolLM2 behind llama.cpp),
one run of every task: the rollouts passed, and the seconds per rollout from the store
(`finished_at - started_at`: sandbox start, agent, tests/test.sh, sandbox stop), median and
largest, and the whole command's wall time. The floor: a bubblewrap sandbox started on a task's
workspace, `true` run in it, and stopped, in this process without Prefect: what every rollout
pays before its agent and test do anything.

    python bench/workspace_agents.py [--agents oracle,nothing,tool_loop] [--limit N]
        [--model-url http://127.0.0.1:8080/v1 --model-name smollm2] [--concurrency 2] [--per-task]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
from tiny import parse

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))


def sandbox_floor(repeats: int) -> float:
    """Median seconds of start + `true` + stop of a bubblewrap sandbox on a task's workspace."""
    from gymflow.environments.registry import load_environment
    from gymflow.sandboxes.bubblewrap import BubblewrapSandbox

    env = load_environment("workspace-basics")
    task = env.workspace_task(env.tasks()[0].task_id)
    spec = task.sandbox_spec(task.environment_dir, hidden=env.hidden_paths())

    async def once() -> float:
        started = time.perf_counter()
        async with BubblewrapSandbox(spec) as box:
            await box.exec("true", timeout_s=30)
        return time.perf_counter() - started

    return statistics.median(asyncio.run(once()) for _ in range(repeats))


def run_agent(agent: str, args: argparse.Namespace, folder: Path) -> dict[str, object]:
    model = ""
    if agent == "tool_loop" and args.model_url:
        model = (
            f"model: {{kind: chat_completions, base_url: {args.model_url}, "
            f"name: {args.model_name}}}\n"
        )
    (folder / f"{agent}.yaml").write_text(
        "benchmark: workspace-basics\n"
        f"harness: {{name: command, agent: {agent}, max_turns: {args.max_turns}}}\n"
        f"out: runs/{agent}\nconcurrency: {args.concurrency}\n"
        + (f"limit: {args.limit}\n" if args.limit else "")
        + model
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", "eval", "run", f"{agent}.yaml"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    wall = time.perf_counter() - started
    store = folder / "runs" / agent / "gymflow.duckdb"
    if not store.exists():
        raise SystemExit(f"{agent}: no store\n{done.stdout}\n{done.stderr}")
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        "SELECT epoch(finished_at - started_at), coalesce(v.passed, FALSE), r.failure_kind, "
        "r.task_id FROM rollouts r LEFT JOIN verifications v USING (rollout_id) ORDER BY r.task_id"
    ).fetchall()
    seconds = [row[0] for row in rows]
    failed: dict[str, int] = {}
    for row in rows:
        if row[2]:
            failed[row[2]] = failed.get(row[2], 0) + 1
    return {
        "agent": agent,
        "rollouts": len(rows),
        "passed": sum(row[1] for row in rows),
        "failed": failed,
        "median_s": statistics.median(seconds),
        "max_s": max(seconds),
        "wall_s": wall,
        "tasks": {row[3]: (row[1], row[0], row[2]) for row in rows},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="oracle,nothing,tool_loop")
    parser.add_argument("--limit", type=int, default=0, help="first N tasks (0: all)")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--model-url", default="")
    parser.add_argument("--model-name", default="model")
    parser.add_argument("--floor-repeats", type=int, default=10)
    parser.add_argument("--per-task", action="store_true", help="each task's outcome too")
    args = parse(parser, argv, agents="oracle,nothing", limit=2, floor_repeats=2)
    floor = sandbox_floor(args.floor_repeats)
    repeats = args.floor_repeats
    print(f"floor: bubblewrap start + `true` + stop: {floor:.3f} s (median of {repeats})")
    model = args.model_url or "gymflow's simulated policy"
    print(f"{'agent':10} {'passed':>9} {'median s':>9} {'max s':>7} {'wall s':>7}  failures")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-workspace-") as scratch:
        for agent in args.agents.split(","):
            row = run_agent(agent, args, Path(scratch))
            rows.append(row)
            label = f"{agent} ({model})" if agent == "tool_loop" else agent
            print(
                f"{label:10} {row['passed']:>4}/{row['rollouts']:<4} {row['median_s']:>9.3f} "
                f"{row['max_s']:>7.3f} {row['wall_s']:>7.1f}  {row['failed'] or '-'}"
            )
    if args.per_task:
        print_per_task(rows)


def print_per_task(rows: list[dict]) -> None:
    """Each task under each agent: pass or fail (or the failure kind) and its seconds."""
    tasks = sorted({task for row in rows for task in row["tasks"]})
    print(f"{'task':26}" + "".join(f" {row['agent']:>16}" for row in rows))
    for task in tasks:
        cells = []
        for row in rows:
            passed, seconds, failure = row["tasks"].get(task, (None, 0.0, "missing"))
            outcome = failure or ("pass" if passed else "fail")
            cells.append(f" {outcome:>10} {seconds:5.2f}")
        print(f"{task:26}" + "".join(cells))


if __name__ == "__main__":
    main()
