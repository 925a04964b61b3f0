"""How often one `gym eval run` does each piece of work that should happen once per run (or once
per stage): plan resolves, benchmark and environment loads, prompt renders, store opens and
config fingerprints (issue 27, item 4).

The run is `gym eval run --benchmark arithmetic-smoke` on the simulated local policy, in a child
process whose every thread carries a profile hook counting calls of the functions below by their
code object, wherever they were imported to; `duckdb.connect` (a nanobind function, which no
profile hook sees) is counted through a wrapper put in its place before gymflow is imported.
`--src DIR` runs another checkout's `src` (before/after on the same machine); a function that
checkout does not have counts as "-". `--tiny`: 5 tasks, 1 repeat.

    python bench/call_counts.py [--limit N] [--repeats R] [--shards N] [--src DIR] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import tiny

#: What is counted: (label, module, qualified name). The plan's resolve is counted as its
#: registry lookup (`build_plan`), which every resolve runs.
COUNTED = (
    ("plan resolves", "gymflow.rollouts.plan", "build_plan"),
    ("benchmark loads", "gymflow.environments.registry", "load_benchmark"),
    ("environment loads", "gymflow.environments.registry", "load_environment"),
    ("prompt renders", "gymflow.core.prompts", "render_prompt"),
    ("store.db.connect calls (held cursors included)", "gymflow.store.db", "connect"),
    ("fingerprint() calls", "gymflow.core.config", "EvalConfig.fingerprint"),
)
DUCKDB_CONNECT = "duckdb.connect calls (store handles)"


def _code(module: str, qualname: str):
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return getattr(target, "__code__", None)


def child(argv: list[str]) -> None:
    """Run `gym ARGV` in this process with the counting hook on, then print the counts as JSON."""
    import duckdb

    codes = {label: _code(module, name) for label, module, name in COUNTED}
    by_code = {code: label for label, code in codes.items() if code is not None}
    counts = dict.fromkeys([*by_code.values(), DUCKDB_CONNECT], 0)
    lock = threading.Lock()
    duckdb_connect = duckdb.connect

    def count(label: str) -> None:
        with lock:
            counts[label] += 1

    def counted_connect(*args, **kwargs):
        count(DUCKDB_CONNECT)
        return duckdb_connect(*args, **kwargs)

    duckdb.connect = counted_connect

    def hook(frame, event, arg) -> None:
        if event == "call" and (label := by_code.get(frame.f_code)) is not None:
            count(label)

    from gymflow.cli import main

    threading.setprofile(hook)
    sys.setprofile(hook)
    code = 0
    try:
        sys.argv = ["gym", *argv]
        main()
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    missing = [label for label, found in codes.items() if found is None]
    print(json.dumps({"exit": code, "counts": counts, "missing": missing}))


def measure(args: argparse.Namespace, out: Path) -> dict:
    gym = ["eval", "run", "--benchmark", args.benchmark, "--out", str(out)]
    gym += ["--shards", str(args.shards)]
    if args.repeats:
        gym += ["--repeats", str(args.repeats)]
    if args.limit:
        gym += ["--limit", str(args.limit)]
    env = {**os.environ, "NO_COLOR": "1"}
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.src, env.get("PYTHONPATH")]))
    ran = subprocess.run(
        [sys.executable, __file__, "--child", *gym],
        capture_output=True,
        text=True,
        env=env,
        cwd=out.parent,
    )
    lines = ran.stdout.strip().splitlines()
    if ran.returncode != 0 or not lines:
        sys.exit(f"the counted run failed ({ran.returncode}):\n{ran.stdout}\n{ran.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if result["exit"] not in (0, 2):  # 2: the health gate, not a failed run
        sys.exit(f"gym {' '.join(gym)} exited {result['exit']}:\n{ran.stderr[-3000:]}")
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="arithmetic-smoke")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--repeats", type=int, default=None, help="the benchmark's otherwise")
    parser.add_argument("--shards", type=int, default=1, help="local shards (subflows)")
    parser.add_argument("--src", help="a checkout's src folder to count instead of this one")
    parser.add_argument("--json", action="store_true")
    args = tiny.parse(parser, limit=5, repeats=1)
    with tempfile.TemporaryDirectory(prefix="gymflow-call-counts-") as tmp:
        result = measure(args, Path(tmp) / "run")
    if args.json:
        print(json.dumps(result, indent=2))
        return
    tasks = f"{args.limit} tasks" if args.limit else "all tasks"
    repeats = f"{args.repeats} repeats" if args.repeats else "the benchmark's repeats"
    print(
        f"gym eval run --benchmark {args.benchmark} ({tasks} x {repeats}, "
        f"{args.shards} shard(s)), src {args.src or 'this checkout'}:"
    )
    for label, count in result["counts"].items():
        print(f"  {label:48} {count}")
    for label in result["missing"]:
        print(f"  {label:48} -")


if __name__ == "__main__":
    main()
