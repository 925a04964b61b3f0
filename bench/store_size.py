"""Store size: bytes per rollout on disk, single-turn and 3-turn, beside Inspect AI's log.

Each workload is collected by gymflow's collector (bench/e2e_rollouts.py's benchmark and
collector) into a fresh DuckDB store; once closed (checkpointed), the store's files are divided by
the rollouts they hold, whole (with the run's task table and schema) and per additional rollout
(the difference to a store of a tenth of the rollouts). Every rollout keeps its full trajectory,
each model call's request and response JSON, and its verification.
- single-turn: `arithmetic` (split full), one model call per rollout.
- 3-turn: the `ledger` tool environment of tests/harness/envs (two parallel deposits, a balance
  read, the answer: three model calls when the policy plays the reference plan).
- multi-turn: the `backoffice` environment (9 tools, about 4 model calls a rollout).
Inspect AI's figure is its `.eval` log for the single-turn workload (bench/inspect_peer.py).

A store keeps each distinct tool list once (`store/tool_lists.py`); the 3-turn workload's
baseline, measured in the same run, is the same store with every model call's tool lists put
back inline in its request and response JSON (as stores were written before), compacted alike.
The single-turn figure is printed beside its bound, 1 KB a rollout (issue 20).

    python bench/store_size.py [--rollouts 5000] [--skip-inspect]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import ceiling  # noqa: E402  (sibling scripts, not a package)
import e2e_rollouts  # noqa: E402
import inspect_peer  # noqa: E402
import tiny  # noqa: E402  (bench/tiny.py: the --tiny flag every script takes)

LEDGER_ROOT = BENCH_DIR.parent / "tests" / "harness" / "envs"
WORKLOADS = {  # name -> (environment, split, extra environment folder)
    "single-turn (arithmetic)": ("arithmetic", "full", None),
    "3-turn (ledger tool loop)": ("ledger", "test", LEDGER_ROOT),
    "multi-turn (backoffice, 9 tools)": ("backoffice", "test", None),
}


def store_bytes(run_dir: Path) -> int:
    return sum(p.stat().st_size for p in run_dir.glob("gymflow.duckdb*"))


SINGLE_TURN_BOUND = 1024  # bytes a rollout


def inline_bytes(run_dir: Path, scratch: Path) -> int:
    """The store's size with every tool list put back inline in the JSON that refers to it,
    rewritten into a fresh file as the run's compaction does (DuckDB's own copy: gymflow's
    compaction refuses a store whose calls no longer match their seals, as this edit makes)."""
    import duckdb

    from gymflow.store.tool_lists import expanded

    copy = scratch / "inline"
    copy.mkdir()
    shutil.copyfile(run_dir / "gymflow.duckdb", copy / "edited.duckdb")
    with duckdb.connect(str(copy / "edited.duckdb")) as con:
        con.execute(
            f"UPDATE model_calls SET request_json = {expanded('request_json')}, "
            f"response_json = {expanded('response_json')}"
        )
        con.execute("DROP TABLE tool_lists")
        con.execute("CHECKPOINT")
    with duckdb.connect(str(copy / "gymflow.duckdb")) as con:
        con.execute(f"ATTACH '{copy / 'edited.duckdb'}' AS edited (READ_ONLY)")
        con.execute("COPY FROM DATABASE edited TO gymflow")
        con.execute("CHECKPOINT")
    return store_bytes(copy)


def measure(environment: str, split: str, extra: Path | None, rollouts: int) -> dict[str, float]:
    """Collect `rollouts` and a tenth of them; bytes per rollout as the collector wrote them, and
    whole and marginal once the store is compacted as the eval-run flow compacts it."""
    from gymflow.store.compact import compact

    sizes: dict[int, tuple[int, int, int]] = {}
    written = inline = 0
    for count in (max(1, rollouts // 10), rollouts):
        with tempfile.TemporaryDirectory(prefix="gymflow-size-") as tmp:
            envs = Path(tmp) / "envs"
            roots = [str(envs), *([str(extra)] if extra else [])]
            os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = os.pathsep.join(roots)
            e2e_rollouts.write_benchmark(envs, environment, split, count)
            figure = e2e_rollouts.run_collector(Path(tmp) / "run", 64, None)
            written = store_bytes(Path(tmp) / "run")
            compact(Path(tmp) / "run")
            sizes[count] = (figure.rollouts, figure.model_calls, store_bytes(Path(tmp) / "run"))
            if count == rollouts:  # the tenth's figure is never printed
                inline = inline_bytes(Path(tmp) / "run", Path(tmp))
    (small_n, _, small_bytes), (n, calls, total) = sizes.values()
    return {
        "rollouts": n,
        "calls_per_rollout": calls / n,
        "bytes": total,
        "written_per_rollout": written / n,
        "per_rollout": total / n,
        "marginal": (total - small_bytes) / (n - small_n) if n > small_n else float("nan"),
        "inline_per_rollout": inline / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5000)
    parser.add_argument("--skip-inspect", action="store_true")
    args = tiny.parse(parser, rollouts=40)

    rows, sizes = [], {}
    for name, (environment, split, extra) in WORKLOADS.items():
        size = sizes[name] = measure(environment, split, extra, args.rollouts)
        rows.append(
            [f"gymflow {name}", f"{size['rollouts']:,}", f"{size['calls_per_rollout']:.2f}",
             f"{size['bytes'] / 2**20:.2f}", f"{size['written_per_rollout']:,.0f}",
             f"{size['per_rollout']:,.0f}", f"{size['marginal']:,.0f}",
             f"{size['inline_per_rollout']:,.0f}"]
        )  # fmt: skip
    if not args.skip_inspect:
        inspect, _, _, version = inspect_peer.measure(args.rollouts)
        per = inspect["log_bytes"] / inspect["samples"]
        rows.append(
            [f"Inspect AI {version} single-turn (.eval log)", f"{inspect['samples']:,}", "1.00",
             f"{inspect['log_bytes'] / 2**20:.2f}", "-", f"{per:,.0f}", "-", "-"]
        )  # fmt: skip
    print(f"store size: bytes on disk per rollout, {args.rollouts:,} rollouts per workload")
    ceiling.print_table(
        [
            "store",
            "rollouts",
            "calls/rollout",
            "MiB",
            "bytes/rollout as written",
            "bytes/rollout",
            "marginal bytes/rollout",
            "bytes/rollout, tool lists inline",
        ],
        rows,
    )
    single = next(iter(sizes.values()))
    print(
        f"single-turn: {single['per_rollout']:,.0f} bytes a rollout, bound {SINGLE_TURN_BOUND:,} "
        f"({'within' if single['per_rollout'] <= SINGLE_TURN_BOUND else 'OVER'})"
    )
    for name, size in list(sizes.items())[1:]:
        print(
            f"{name}: {size['per_rollout']:,.0f} bytes a rollout, tool lists stored once, "
            f"against {size['inline_per_rollout']:,.0f} with them inline in the same rows "
            f"({size['inline_per_rollout'] / size['per_rollout']:.2f}x)"
        )


if __name__ == "__main__":
    main()
