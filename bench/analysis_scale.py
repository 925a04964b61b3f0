"""Time health, profile, diagnose and reverify on synthetic stores of 100,000 and 1,000,000
rollouts (1,000 / 10,000 tasks x 100 repeats), with the peak memory of each stage.

The stores are built by bulk SQL (no collector, no model): arithmetic tasks, one model call per
rollout, a verification by the exact-match numeric verifier consistent with each output, and a
per-task skill so that some tasks always pass, some never and the rest sometimes. Each stage runs
in a fresh subprocess, so its peak RSS (ru_maxrss) is its own.

    python bench/analysis_scale.py                     # both sizes
    python bench/analysis_scale.py --sizes 100000      # one size
    python bench/analysis_scale.py --keep /tmp/stores  # keep the stores for inspection
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tiny

REPEATS = 100
STAGES = ("health", "profile", "diagnose", "reverify")


def build_store(path: Path, tasks: int, repeats: int = REPEATS) -> float:
    """Write a synthetic run store with tasks x repeats rollouts; returns seconds taken."""
    from gymflow.environments.registry import load_environment
    from gymflow.store.db import connect
    from gymflow.store.writer import register_verifier_version

    started = time.perf_counter()
    server = load_environment("arithmetic").resources_server({"extract": "answer_line"})
    version = server.verifier_version
    con = connect(path, create=True)
    sampling = '{"temperature":0.7,"top_p":1.0,"max_output_tokens":256,"seed":0}'
    con.execute(
        """
        INSERT INTO runs (run_id, created_at, gymflow_version, config_json, config_hash,
            benchmark, benchmark_version, environment, dataset_version, split, model, harness,
            prompt_template, sampling_json, repeats, shard_count, verifier_version)
        VALUES ('bench', now(), '0.1.0', '{}', 'bench', 'arithmetic-bench', 'bench-v1',
            'arithmetic', 'data-v1', 'test', 'bench-model', 'single_turn', '{{ question }}',
            ?, ?, 1, ?)
        """,
        [sampling, repeats, version],
    )
    register_verifier_version(con, version, "numeric_match", server.params.model_dump())
    con.execute(
        """
        INSERT INTO tasks
        SELECT 'bench', printf('task-%06d', i), i, 0, 'Compute ' || i || ' + 7.',
               'Answer: ' || (i + 7), json_object('answer', i + 7),
               [CASE WHEN i % 3 = 0 THEN 'word_problem' ELSE 'expression' END],
               CASE i % 3 WHEN 0 THEN 'easy' WHEN 1 THEN 'medium' ELSE 'hard' END
        FROM range(?) t(i)
        """,
        [tasks],
    )
    # skill per task: a third always right, a fifth never, the rest right with probability s
    con.execute(
        """
        CREATE TEMP TABLE plan AS
        SELECT i, r, printf('task-%06d', i) AS task_id,
               md5(i || '-' || r)[1:20] AS rollout_id,
               CASE WHEN hash(i) % 100 < 35 THEN TRUE
                    WHEN hash(i) % 100 < 55 THEN FALSE
                    ELSE (hash(i, r) % 1000) / 1000.0 < 0.15 + 0.7 * (hash(i * 7) % 100) / 100.0
               END AS correct
        FROM range(?) t(i), range(?) s(r)
        """,
        [tasks, repeats],
    )
    con.execute(
        """
        INSERT INTO rollouts
        SELECT rollout_id, 'bench', task_id, r, r, 'completed', NULL, NULL, FALSE,
               'Working it through gives ' || (i + 7 + (NOT correct)::INT) || '.' || chr(10)
                   || 'Answer: ' || (i + 7 + (NOT correct)::INT),
               '[{"type":"message","role":"user","content":"Compute ' || i || ' + 7."},'
                   || '{"type":"message","role":"assistant","content":[{"type":"output_text",'
                   || '"text":"Answer: ' || (i + 7 + (NOT correct)::INT) || '"}]}]',
               1, 1, 40, 12, 0.1 + (r % 10) / 100.0, now(), now(), '{}'
        FROM plan
        """
    )
    con.execute(
        """
        INSERT INTO model_calls
        SELECT rollout_id, 0, 0, 'completed', NULL, 200, 0.1 + (r % 10) / 100.0, 40, 0, 12, 0,
               '{"temperature":0.7,"top_p":1.0,"max_output_tokens":256,"seed":' || r || '}',
               '{"model":"bench-model","input":[]}', '{"status":"completed"}', NULL
        FROM plan
        """
    )
    con.execute(
        """
        INSERT INTO verifications
        SELECT rollout_id, ?, 'ok', correct::INT::DOUBLE, correct, NULL,
               json_object('reason', CASE WHEN correct THEN 'match' ELSE 'wrong_answer' END,
                           'extracted', (i + 7 + (NOT correct)::INT)::VARCHAR,
                           'expected', (i + 7)::DOUBLE),
               now()
        FROM plan
        """,
        [version],
    )
    con.execute("DROP TABLE plan")
    con.execute("CHECKPOINT")
    con.close()
    return time.perf_counter() - started


def run_stage(stage: str, store: Path) -> dict[str, float]:
    """Run one stage in this process (the child); returns seconds and peak RSS in MiB.

    Imports happen before the clock starts: the figure is the stage, not Python start-up."""
    from gymflow.analysis.decide import recommend
    from gymflow.analysis.diagnose import diagnose
    from gymflow.analysis.health import health
    from gymflow.analysis.profile import profile
    from gymflow.environments.registry import load_environment
    from gymflow.reverify import reverify
    from gymflow.store.db import connect

    load_environment("arithmetic")
    started = time.perf_counter()
    if stage == "reverify":
        result = reverify(store, {"extract": "last_number"})
        detail = f"{result.reverified} judged, {result.flips.rollouts.count} flips"
    else:
        con = connect(store, read_only=True)
        try:
            if stage == "health":
                out = health(con)
                detail = f"verdict {out.verdict}"
            elif stage == "profile":
                out = profile(con)
                detail = f"pass@1 {out.pass_at_1:.4f}"
            else:
                out = diagnose(con)
                detail = f"evidence points to {recommend(out).action}"
        finally:
            con.close()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mib": peak, "detail": detail}


def stage_in_child(script: str, stage: str, store: Path, *extra: str) -> dict:
    """Run one stage as `script --stage STAGE --store STORE`, in a fresh process (its own peak
    memory), and return the JSON figure it prints last."""
    child = subprocess.run(
        [sys.executable, script, "--stage", stage, "--store", str(store), *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(child.stdout.strip().splitlines()[-1])


def report_stage(rows: list, size: int, stage: str, result: dict) -> None:
    rows.append((size, stage, result))
    print(
        f"{size:>9,} {stage:<12} {result['seconds']:7.2f} s "
        f"{result['peak_rss_mib']:7.0f} MiB  {result['detail']}",
        flush=True,
    )


def print_table(rows: list) -> None:
    print("\n| rollouts | stage | seconds | peak RSS (MiB) | result |")
    print("|---:|---|---:|---:|---|")
    for size, stage, result in rows:
        print(
            f"| {size:,} | {stage} | {result['seconds']:.2f} | {result['peak_rss_mib']:.0f} | "
            f"{result['detail']} |"
        )
    print("\n(2 shared cores, other engineers' work running: figures are noisy.)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--keep", type=Path, help="Build the stores here and keep them.")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = tiny.parse(parser, sizes=[2000])
    if args.stage:  # child mode
        print(json.dumps(run_stage(args.stage, args.store)))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="gymflow-bench-"))
    rows = []
    try:
        for size in args.sizes:
            store = root / f"store-{size}"
            if store.exists():
                shutil.rmtree(store)
            built = build_store(store, size // REPEATS)
            print(f"built {size:,} rollouts in {built:.1f} s", flush=True)
            for stage in STAGES:
                report_stage(rows, size, stage, stage_in_child(__file__, stage, store))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print_table(rows)


if __name__ == "__main__":
    main()
