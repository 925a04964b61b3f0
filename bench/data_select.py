"""Time `gym data` on synthetic stores of 100,000 and 1,000,000 rollouts (1,000 / 10,000 tasks x
100 repeats, built as bench/analysis_scale.py builds them, with 30-word prompts of which one in
ten nearly copies another), with the peak memory of each stage.

Stages, each in a fresh subprocess so its peak RSS (ru_maxrss) is its own:
- profile: the training-data profile (histograms per tag and difficulty, MinHash near-duplicates,
  the default selection's size);
- select: the informative tasks (0 < pass rate < 1) written as NeMo Gym rows, Parquet and a
  benchmark YAML;
- trajectories: the passing rollouts of those tasks as chat JSONL, after the health checks, the
  length filter and dedup (the synthetic outputs of a task repeat, so most are duplicates);
- trajectories-all: the same without health checks or dedup: every scored rollout converted.

    python bench/data_select.py                     # both sizes
    python bench/data_select.py --sizes 100000      # one size
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import tiny
from analysis_scale import (
    REPEATS,
    REPO,
    build_in_child,
    print_table,
    report_stage,
    stage_in_child,
)

STAGES = ("profile", "select", "trajectories", "trajectories-all")


def word_problem_prompts(store: Path) -> None:
    """Give every task a 30-word prompt (the analysis store's are four words). In every ten
    tasks, the second copies the first but for case and punctuation, and the third changes one
    word of it (word 3-gram Jaccard about 0.82): MinHash has real work and real groups to find."""
    from gymflow.store.db import connect

    con = connect(store)
    con.execute(
        """
        WITH p AS (
            SELECT task_id, task_index % 10 AS k,
                   task_index - CASE WHEN task_index % 10 IN (1, 2) THEN task_index % 10
                                     ELSE 0 END AS n
            FROM tasks
        )
        UPDATE tasks SET prompt = (
            SELECT CASE WHEN p.k = 1 THEN upper(text) || '!!' ELSE text END
            FROM (SELECT 'A farmer at market ' || p.n || ' sells ' || p.n * 3
                         || ' baskets of apples, each basket holding ' || p.n % 97
                         || ' apples and twelve pears; after lunch she buys '
                         || CASE WHEN p.k = 2 THEN 'eight' ELSE 'seven' END
                         || ' more baskets from neighbour ' || p.n * 7
                         || '. How many apples does she have now, counting every basket?'
                         AS text)
        )
        FROM p WHERE p.task_id = tasks.task_id
        """
    )
    con.close()


def run_stage(stage: str, store: Path, out: Path) -> dict[str, object]:
    """One stage in this process (the child); imports happen before the clock starts."""
    from gymflow.data.chat import TrajectoryFilters, prepare_trajectories, write_trajectories
    from gymflow.data.profile import data_profile
    from gymflow.data.provenance import provenance
    from gymflow.data.rows import write_selection
    from gymflow.data.select import Filters, select_tasks
    from gymflow.store.db import connect

    started = time.perf_counter()
    con = connect(store, read_only=True)
    try:
        if stage == "profile":
            result = data_profile(con)
            detail = (
                f"{result.informative} of {result.tasks} tasks informative, "
                f"{result.near_duplicates.groups} near-duplicate groups"
            )
        else:
            selection = select_tasks(con, Filters())
            record = provenance(
                con,
                kind=stage,
                store=store,
                verifier_version=selection.verifier_version,
                filters=selection.filters.as_dict(),
                counts=selection.counts,
            )
            if stage == "select":
                written = write_selection(con, selection, out, "bench", record, parquet=True)
                detail = f"{written.rows} tasks written"
            else:
                every = stage == "trajectories-all"
                filters = TrajectoryFilters(healthy=not every, dedup=not every)
                counts = prepare_trajectories(con, selection.verifier_version, filters)
                rows = write_trajectories(con, "passing", out / "sft.jsonl", record, parquet=False)
                detail = (
                    f"{rows} conversations from {counts['scored_rollouts']} scored rollouts "
                    f"({counts['dropped_duplicates']} duplicates)"
                )
    finally:
        con.close()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mib": peak, "detail": detail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--keep", type=Path, help="Build the stores here and keep them.")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = tiny.parse(parser, sizes=[2000])
    if args.stage:  # child mode
        print(json.dumps(run_stage(args.stage, args.store, args.out)))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="gymflow-bench-data-"))
    rows = []
    try:
        for size in args.sizes:
            store = root / f"store-{size}"
            if not (store / "gymflow.duckdb").exists():
                # both in children: a stage forked from this process inherits its peak RSS
                built = build_in_child(REPO, store, size // REPEATS)
                prompts = multiprocessing.get_context("spawn").Process(
                    target=word_problem_prompts, args=(store,)
                )
                prompts.start()
                prompts.join()
                if prompts.exitcode:
                    sys.exit(f"writing the prompts into {store} exited {prompts.exitcode}")
                print(f"built {size:,} rollouts in {built:.1f} s", flush=True)
            for stage in STAGES:
                out = str(root / f"out-{size}")
                result = stage_in_child(__file__, stage, store, "--out", out)
                report_stage(rows, size, stage, result)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print_table(rows)


if __name__ == "__main__":
    main()
