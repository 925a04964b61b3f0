"""Time health, profile, diagnose and reverify on synthetic stores of 100,000 and 1,000,000
rollouts (1,000 / 10,000 tasks x 100 repeats), with the peak memory of each stage.

The stores are built by bulk SQL (no collector, no model): arithmetic tasks, one model call per
rollout, a verification by the exact-match numeric verifier consistent with each output, and a
per-task skill so that some tasks always pass, some never and the rest sometimes. Each stage runs
in a fresh subprocess, so its peak RSS (ru_maxrss) is its own.

    python bench/analysis_scale.py                     # both sizes
    python bench/analysis_scale.py --sizes 100000      # one size
    python bench/analysis_scale.py --keep /tmp/stores  # keep the stores for inspection
    python bench/analysis_scale.py --baseline /tmp/old  # interleaved with another checkout
    python bench/analysis_scale.py --stages health seal analyse  # the seal's share; all in one

`--baseline CHECKOUT` (a folder holding that commit's src/ and bench/, e.g. from `git archive
9bdf3f3 src bench | tar -x -C /tmp/old`) builds a store with that checkout's own code and runs
each stage there right after it runs here, so both are measured in the same minutes on a shared
machine. CPU seconds (user + sys, the whole child process) are what to compare under load; the
wall seconds are the stage's own, imports excluded. Reverify runs on a copy of the store each
time (it adds a verifier version), so every round judges every rollout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tiny

REPEATS = 100
REPO = Path(__file__).resolve().parent.parent
#: `seal`: health's seal check alone (`store.seal.check_seals`, the query health runs), to read
#: its share of health; `analyse`: health, profile, diagnose and the decision on one connection,
#: as a run's flow and report compute them (`analysis.run.analyse`).
STAGES = ("health", "profile", "diagnose", "reverify", "seal", "analyse", "health-checked")
#: `health-checked`: health on a store whose seals a health before it (untimed) checked in full,
#: unchanged since (store/checked_stores.py: the recompute skipped). A checkout from before
#: that runs its `health` in its place, which always recomputes.
BASELINE_STAGE = {"health-checked": "health"}
#: What runs without --stages: the stages every checkout since the first of this script has.
DEFAULT_STAGES = ("health", "profile", "diagnose", "reverify")


def build_store(path: Path, tasks: int, repeats: int = REPEATS) -> float:
    """Write a synthetic run store with tasks x repeats rollouts; returns seconds taken."""
    from gymflow.environments.registry import load_environment
    from gymflow.store.db import connect
    from gymflow.store.seal import claim
    from gymflow.store.seal_key import sealed
    from gymflow.store.sealed_rows import VERDICTS, Fold, folded_in
    from gymflow.store.verdict_message import MESSAGE, message_sql
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
    # sealed as every writer seals: the store's first seal record seals every rollout and model
    # call whole (store/seal.py, store/sealed_rows.py), as an import's does
    key = claim(con, str(path))
    verdicts = sealed(
        con,
        key,
        f"""
        SELECT v.*, {message_sql("v", "r")} AS {MESSAGE}
        FROM (
            SELECT rollout_id, ? AS verifier_version, 'ok' AS status,
                   correct::INT::DOUBLE AS reward, correct AS passed,
                   NULL::VARCHAR AS failure_kind,
                   json_object('reason', CASE WHEN correct THEN 'match' ELSE 'wrong_answer' END,
                               'extracted', (i + 7 + (NOT correct)::INT)::VARCHAR,
                               'expected', (i + 7)::DOUBLE) AS details_json,
                   now()::TIMESTAMP AS created_at
            FROM plan
        ) v
        JOIN rollouts r ON r.rollout_id = v.rollout_id
        """,
        [version],
    )
    con.register("verdicts_sealed", verdicts)
    con.execute("INSERT INTO verifications BY NAME SELECT * FROM verdicts_sealed")
    con.unregister("verdicts_sealed")
    fold = Fold()
    fold.add_seals(verdicts.column("seal"))
    folded_in(con, key, VERDICTS, fold)  # the verdict set's record
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
    from gymflow.analysis.run import analyse
    from gymflow.environments.registry import load_environment
    from gymflow.reverify.new_version import reverify
    from gymflow.store.db import connect
    from gymflow.store.seal import check_seals

    load_environment("arithmetic")
    if stage == "health-checked":  # the full check that records the store's state, untimed
        con = connect(store, read_only=True)
        try:
            health(con)
        finally:
            con.close()
    started = time.perf_counter()
    if stage == "reverify":
        result = reverify(store, {"extract": "last_number"})
        detail = f"{result.reverified} judged, {result.flips.rollouts.count} flips"
    else:
        con = connect(store, read_only=True)
        try:
            if stage in ("health", "health-checked"):
                out = health(con)
                checked = getattr(out, "seals_checked_at", None)
                detail = f"verdict {out.verdict}" + (
                    f", seals checked at {checked:%H:%M:%S}" if checked else ", seals recomputed"
                )
                # what the seals of the rows say (a checkout before one was sealed lacks it)
                detail += "".join(
                    f", {name} {out.checks[name].status}"
                    for name in ("rollouts_edited", "calls_edited")
                    if name in out.checks
                )
            elif stage == "profile":
                out = profile(con)
                detail = f"pass@1 {out.pass_at_1:.4f}"
            elif stage == "diagnose":
                out = diagnose(con)
                detail = f"evidence points to {recommend(out).action}"
            elif stage == "seal":
                out = check_seals(con)
                detail = f"{out.mismatched} of the seals mismatched ({out.store.state})"
            else:
                out = analyse(con)
                detail = f"{out.health.verdict}, next action {out.decision.action}"
        finally:
            con.close()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mib": peak, "detail": detail}


def stage_in_child(
    script: str, stage: str, store: Path, *extra: str, src: Path | None = None
) -> dict:
    """Run one stage as `script --stage STAGE --store STORE`, in a fresh process (its own peak
    memory) importing gymflow from `src` when given, and return the JSON figure it prints last
    with the process's CPU seconds (user + sys) beside it."""
    env = {**os.environ, "PYTHONPATH": str(src)} if src else None
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(
            [sys.executable, script, "--stage", stage, "--store", str(store), *extra],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        errors = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            sys.exit(f"{script} --stage {stage} exited {child.returncode}:\n{errors}")
        out.seek(0)
        result = json.loads(out.read().strip().splitlines()[-1])
    return {**result, "cpu_s": usage.ru_utime + usage.ru_stime}


def build_in_child(checkout: Path, store: Path, tasks: int) -> float:
    """Build a store with `checkout`'s own build_store and gymflow (its schema may differ).
    In a child for this checkout too: Linux keeps a process's peak RSS across fork and exec,
    so every stage forked from a parent that had built 10M rollouts in itself reported the
    parent's 4.8 GiB as its own."""
    code = (
        "import sys; from pathlib import Path; sys.argv = ['x']; import analysis_scale as a; "
        f"print(a.build_store(Path({str(store)!r}), {tasks}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout / "src"),
                                                        str(checkout / "bench")])}  # fmt: skip
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(child.stdout.strip().splitlines()[-1])


def report_stage(rows: list, size: int, stage: str, result: dict, code: str = "") -> None:
    rows.append((size, stage, code, result))
    cpu = f"{result['cpu_s']:7.2f} s CPU " if "cpu_s" in result else ""
    print(
        f"{size:>10,} {stage:<12} {code:<9} {result['seconds']:7.2f} s {cpu}"
        f"{result['peak_rss_mib']:7.0f} MiB  {result['detail']}",
        flush=True,
    )


def print_table(rows: list) -> None:
    print("\n| rollouts | stage | code | seconds | CPU s (user + sys) | peak RSS (MiB) | result |")
    print("|---:|---|---|---:|---:|---:|---|")
    for size, stage, code, result in rows:
        cpu = f"{result['cpu_s']:.2f}" if "cpu_s" in result else "–"
        print(
            f"| {size:,} | {stage} | {code or 'this'} | {result['seconds']:.2f} | {cpu} | "
            f"{result['peak_rss_mib']:.0f} | {result['detail']} |"
        )
    print(f"\n(load average {os.getloadavg()[0]:.1f} at the end; 2 shared cores: wall seconds are")
    print("noisy, CPU seconds much less so.)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--keep", type=Path, help="Build the stores here and keep them.")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(DEFAULT_STAGES))
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (src/ and bench/) to run every stage on too, interleaved",
    )
    parser.add_argument("--rounds", type=int, default=1, help="times each stage runs")
    parser.add_argument(
        "--reuse", action="store_true", help="with --keep: use the stores built there before"
    )
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = tiny.parse(parser, sizes=[2000], stages=list(STAGES))
    if args.stage:  # child mode
        print(json.dumps(run_stage(args.stage, args.store)))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="gymflow-bench-"))
    rows = []
    codes = {"this": (Path(__file__), None)}
    if args.baseline:
        base = args.baseline.resolve()
        codes["baseline"] = (base / "bench" / "analysis_scale.py", base / "src")
    try:
        for size in args.sizes:
            stores = {code: root / f"store-{size}-{code}" for code in codes}
            for code, store in stores.items():
                if args.reuse and store.exists():
                    print(f"reusing {store}", flush=True)
                    continue
                if store.exists():
                    shutil.rmtree(store)
                checkout = args.baseline.resolve() if code == "baseline" else REPO
                built = build_in_child(checkout, store, size // REPEATS)
                print(f"built {size:,} rollouts ({code}) in {built:.1f} s", flush=True)
            for stage in args.stages:
                for _ in range(args.rounds):
                    for code, (script, src) in codes.items():
                        store = stores[code]
                        if stage == "reverify":  # on a copy: each round judges every rollout
                            # at a path never used before: a writer refuses an older copy put
                            # back where this machine's writers took a store further (the
                            # sealed-stores ledger), as the second size's copy was
                            copy = Path(tempfile.mkdtemp(prefix="reverified-", dir=root))
                            store = shutil.copytree(stores[code], copy / "run")
                        ran = BASELINE_STAGE.get(stage, stage) if code == "baseline" else stage
                        result = stage_in_child(str(script), ran, store, src=src)
                        report_stage(rows, size, stage, result, code)
                        if stage == "reverify":
                            shutil.rmtree(store.parent)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print_table(rows)


if __name__ == "__main__":
    main()
