"""`gym data select | trajectories | profile`: a run's rollouts as training data."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from gymflow.analysis.seals import intact_or_refused
from gymflow.cli.app import console, data_app, fail, print_json, warn_stale_report
from gymflow.core import bounded_yaml
from gymflow.core.written import own_folder
from gymflow.data.chat import KINDS, TrajectoryFilters, prepare_trajectories, write_trajectories
from gymflow.data.profile import DataProfile, data_profile
from gymflow.data.provenance import provenance
from gymflow.data.rows import write_selection
from gymflow.data.select import INFORMATIVE, Filters, parse_band, select_tasks
from gymflow.environments.benchmark import Benchmark
from gymflow.environments.registry import BENCHMARKS_VARIABLE, PATH_VARIABLE, beyond_data
from gymflow.present import format_counts, format_number, format_percent
from gymflow.present.terminal import print_table, styled, table
from gymflow.store.db import connect

RunDir = Annotated[Path, typer.Argument(help="Run directory (or its .duckdb file).")]
PassRate = Annotated[
    str | None,
    typer.Option(
        help="Pass-rate interval: '(' / ')' exclude an end, '[' / ']' include it. Default (0,1) "
        "(the informative tasks), or any pass rate when --bucket is given."
    ),
]
Bucket = Annotated[
    list[str] | None,
    typer.Option(
        help="Keep tasks in this diagnose bucket (repeatable): always_pass, "
        "sometimes_pass, never_pass, missing."
    ),
]
Tag = Annotated[list[str] | None, typer.Option(help="Keep tasks with this tag (repeatable).")]
Difficulty = Annotated[
    list[str] | None, typer.Option(help="Keep tasks of this difficulty (repeatable).")
]
MaxInput = Annotated[
    float | None,
    typer.Option(help="Keep tasks whose mean input tokens per rollout are at most this."),
]
MaxOutput = Annotated[
    float | None,
    typer.Option(help="Keep tasks whose mean output tokens per rollout are at most this."),
]
Version = Annotated[str | None, typer.Option(help="Verifier version to read (default newest).")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _filters(
    pass_rate: str | None,
    bucket: list[str] | None,
    tag: list[str] | None,
    difficulty: list[str] | None,
    max_input_tokens: float | None,
    max_output_tokens: float | None,
) -> Filters:
    # A bucket says which pass rates it wants; the informative default would contradict it.
    default = None if bucket else INFORMATIVE
    band = parse_band(pass_rate) if pass_rate is not None else default
    return Filters(
        pass_rate=band,
        buckets=tuple(bucket or ()),
        tags=tuple(tag or ()),
        difficulties=tuple(difficulty or ()),
        max_input_tokens=max_input_tokens,
        max_output_tokens=max_output_tokens,
    )


@data_app.command("select")
def data_select(
    run_dir: RunDir,
    out: Annotated[
        Path | None, typer.Option(help="Directory to write into (default RUN_DIR/data).")
    ] = None,
    name: Annotated[str, typer.Option(help="Name of the dataset and its benchmark.")] = "selection",
    pass_rate: PassRate = None,
    bucket: Bucket = None,
    tag: Tag = None,
    difficulty: Difficulty = None,
    max_input_tokens: MaxInput = None,
    max_output_tokens: MaxOutput = None,
    verifier_version: Version = None,
    parquet: Annotated[bool, typer.Option(help="Also write NAME.parquet.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Count only; write nothing.")] = False,
    json_output: Json = False,
) -> None:
    """Choose tasks by pass rate, bucket, tag, difficulty and token length; write them to
    OUT/benchmarks/ as NeMo Gym dataset rows (NAME.jsonl, provenance in NAME.meta.json) and a
    dataset benchmark (NAME.yaml) that evaluates them again."""
    if not name or "/" in name or name.startswith("."):
        fail(f"--name {name!r}: a plain file name is needed")
    filters = _filters(pass_rate, bucket, tag, difficulty, max_input_tokens, max_output_tokens)
    con = connect(run_dir, read_only=True)
    try:
        warn_stale_report(con, run_dir)
        intact_or_refused(con, run_dir)
        selection = select_tasks(con, filters, verifier_version=verifier_version)
        record = provenance(
            con,
            kind="task_selection",
            store=run_dir,
            verifier_version=selection.verifier_version,
            filters=filters.as_dict(),
            counts=selection.counts,
        )
        paths: dict[str, str] = {}
        if not dry_run:
            if not selection.counts["kept"]:
                fail("no task passes these filters; nothing written")
            target = out or own_folder(_run_folder(run_dir), "data")
            paths = write_selection(con, selection, target, name, record, parquet=parquet).paths
    finally:
        con.close()
    payload = {**record, "task_ids": selection.task_ids, "paths": paths}
    if json_output:
        print_json(payload)
        return
    counts = selection.counts
    console.print(
        styled(
            "kept ",
            (str(counts["kept"]), "bold"),
            f" of {counts['tasks']} tasks ({counts['rollouts']} rollouts) under verifier "
            f"{selection.verifier_version}",
        )
    )
    kept = format_counts({b: n for b, n in counts["kept_by_bucket"].items() if n})
    if kept:
        console.print(f"  by bucket: {kept}")
    for filter_name, rejected in counts["rejected_by"].items():
        console.print(f"  {filter_name}: {rejected} tasks fail it")
    for kind, path in paths.items():
        console.print(f"  {kind}: {path}")
    if paths:
        _print_how_to_evaluate(Path(paths["benchmark"]), name)


def _print_how_to_evaluate(benchmark: Path, name: str) -> None:
    root = benchmark.parent.parent
    data = bounded_yaml.safe_load(bounded_yaml.read_text(benchmark))
    beyond = beyond_data(data, Benchmark.model_validate(data))
    if beyond:
        # data cannot choose this (`beyond_data`): trusting it is the owner's act, not a paste
        console.print(
            f"evaluate it again: {beyond}, so gymflow does not run it from the run's folder: "
            f"read it, copy {root} somewhere only you write, and put that on {PATH_VARIABLE}"
        )
        return
    # On a line of its own, never wrapped (the console soft-wraps): it is copied and pasted.
    # The benchmark path, never the environments one: the folder is a run's, and whoever
    # can write it could add an environment there whose module the command would import.
    console.print("evaluate it again:")
    console.print(
        f"  {BENCHMARKS_VARIABLE}={shlex.quote(str(root))} gym eval run --benchmark {name}"
    )


def _run_folder(run_dir: Path) -> Path:
    return run_dir.parent if run_dir.suffix == ".duckdb" else run_dir


@data_app.command("trajectories")
def data_trajectories(
    run_dir: RunDir,
    out: Annotated[Path, typer.Option(help="File to write: .jsonl (chat JSONL) or .parquet.")],
    kind: Annotated[
        str,
        typer.Option(
            help="passing: one conversation per passing rollout (imitation); pairs: a passing "
            "and a failing rollout of the same task (preference)."
        ),
    ] = "passing",
    pass_rate: PassRate = None,
    bucket: Bucket = None,
    tag: Tag = None,
    difficulty: Difficulty = None,
    max_input_tokens: MaxInput = None,
    max_output_tokens: MaxOutput = None,
    verifier_version: Version = None,
    include_flagged: Annotated[
        bool, typer.Option(help="Keep rollouts a health check flags (dropped by default).")
    ] = False,
    max_rollout_tokens: Annotated[
        int | None, typer.Option(help="Drop rollouts with more output tokens than this.")
    ] = None,
    keep_duplicates: Annotated[
        bool, typer.Option(help="Keep rollouts of a task whose completions are identical.")
    ] = False,
    json_output: Json = False,
) -> None:
    """Export the selected tasks' trajectories as chat-format training data (OpenAI fine-tuning
    JSONL: messages with tool calls, and tools; or Parquet), with provenance beside it."""
    if kind not in KINDS:
        fail(f"--kind {kind!r}: choose one of {', '.join(KINDS)}")
    if out.suffix not in (".jsonl", ".parquet"):
        fail(f"--out {out}: name a .jsonl or .parquet file")
    trajectory_filters = TrajectoryFilters(
        healthy=not include_flagged, max_output_tokens=max_rollout_tokens, dedup=not keep_duplicates
    )
    filters = _filters(pass_rate, bucket, tag, difficulty, max_input_tokens, max_output_tokens)
    con = connect(run_dir, read_only=True)
    try:
        warn_stale_report(con, run_dir)
        intact_or_refused(con, run_dir)
        selection = select_tasks(con, filters, verifier_version=verifier_version)
        counts = prepare_trajectories(con, selection.verifier_version, trajectory_filters)
        counts = {"tasks": selection.counts, "rollouts": counts}
        record = provenance(
            con,
            kind=f"trajectories:{kind}",
            store=run_dir,
            verifier_version=selection.verifier_version,
            filters={**filters.as_dict(), **trajectory_filters.as_dict()},
            counts=counts,
        )
        rows = write_trajectories(con, kind, out, record, parquet=out.suffix == ".parquet")
    finally:
        con.close()
    record["counts"]["rows"] = rows
    if json_output:
        print_json({**record, "path": str(out)})
        return
    r = counts["rollouts"]
    console.print(
        styled(
            "wrote ",
            (str(rows), "bold"),
            f" {kind} rows to {out} from {selection.counts['kept']} tasks; rollouts: "
            f"{r['scored_rollouts']} scored, {r['dropped_unhealthy']} flagged by health, "
            f"{r['dropped_too_long']} too long, {r['dropped_duplicates']} duplicates dropped",
        )
    )


@data_app.command("profile")
def data_profile_command(
    run_dir: RunDir,
    threshold: Annotated[
        float, typer.Option(help="Near-duplicate threshold: estimated Jaccard of word 3-grams.")
    ] = 0.8,
    groups: Annotated[int, typer.Option(min=0, help="Near-duplicate groups to list.")] = 20,
    pass_rate: PassRate = None,
    bucket: Bucket = None,
    tag: Tag = None,
    difficulty: Difficulty = None,
    max_input_tokens: MaxInput = None,
    max_output_tokens: MaxOutput = None,
    verifier_version: Version = None,
    json_output: Json = False,
) -> None:
    """Pass-rate histogram over tasks (overall, per tag, per difficulty), the informative share,
    near-duplicate prompts with their pass rates, and how many tasks the selection keeps."""
    filters = _filters(pass_rate, bucket, tag, difficulty, max_input_tokens, max_output_tokens)
    con = connect(run_dir, read_only=True)
    try:
        warn_stale_report(con, run_dir)
        intact_or_refused(con, run_dir)
        result = data_profile(
            con,
            verifier_version=verifier_version,
            filters=filters,
            threshold=threshold,
            groups_shown=groups,
        )
    finally:
        con.close()
    if json_output:
        print_json(result.as_json())
        return
    _print_profile(result)


def _rate(value: float | None) -> str:
    return format_number(value, 2)


def _print_profile(result: DataProfile) -> None:
    console.print(
        styled(
            f"{result.tasks} tasks, ",
            (str(result.informative), "bold"),
            f" informative ({format_percent(result.informative_share)} "
            "of the tasks with a score: 0 < pass rate < 1) "
            f"under verifier {result.verifier_version}",
        )
    )
    grid = table(
        "group", "tasks", "informative", "mean pass", "tasks per pass-rate bin", keys=("group",)
    )
    rows = [("all", result.overall)]
    rows += [(f"tag {g.group}", g) for g in result.by_tag]
    rows += [(f"difficulty {g.group}", g) for g in result.by_difficulty]
    for label, g in rows:
        grid.add_row(
            label,
            str(g.tasks),
            format_percent(g.informative_share, 0),
            _rate(g.mean_pass_rate),
            " ".join(f"{b}:{v}" for b, v in g.histogram.items() if v),
        )
    print_table(console, grid)
    dups = result.near_duplicates
    console.print(
        f"near-duplicate prompts (exact similarity >= {dups.threshold}; precision 100%, "
        f"recall {dups.recall_at_threshold:.1%} at the threshold): {dups.groups} groups, "
        f"{dups.grouped_tasks} tasks"
    )
    for group in dups.shown:
        rates = ", ".join(f"{m.task_id} {_rate(m.pass_rate)}" for m in group.members)
        console.print(f"  {group.tasks} tasks (similarity {group.similarity:.2f}): {rates}")
    sel = result.selection
    chosen = {k: v for k, v in sel.filters.items() if v not in (None, [])}
    console.print(
        styled(
            f"selection ({format_counts(chosen, between='=') if chosen else 'no filter'}): keeps ",
            (str(sel.kept), "bold"),
            f" of {sel.tasks} tasks",
        )
    )
