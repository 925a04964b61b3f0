"""`gym runs`: the history of the runs under a folder, their trend, and the regression gate."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gymflow.cli import exit_codes
from gymflow.cli.app import app, console, fail, print_json

runs_app = typer.Typer(
    help="The runs under a folder: list them, draw a benchmark's trend, gate on regressions.",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")

Root = Annotated[Path, typer.Option(help="Folder holding the run folders (searched below).")]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


@runs_app.command("list")
def runs_list(
    root: Annotated[Path, typer.Argument(help="Folder holding the run folders.")] = Path("runs"),
    benchmark: Annotated[str | None, typer.Option(help="Only this benchmark.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Every run under ROOT with its factors and headline; the catalog is ROOT/catalog.duckdb,
    a DuckDB file any SQL client can query (table `runs`)."""
    from gymflow.history.catalog import refresh

    catalog = refresh(root)
    entries = catalog.of_benchmark(benchmark) if benchmark else catalog.entries
    if as_json:
        print_json(
            {
                "catalog": str(catalog.path),
                "runs": [asdict(e) for e in entries],
                "skipped": [{"run_dir": d, "why": why} for d, why in catalog.skipped],
            }
        )
        return
    columns = ("when", "benchmark", "model", "harness", "verifier", "pass@1", "95% CI", "scored")
    columns += ("run",)
    table = Table(*columns)
    for e in sorted(entries, key=lambda e: (str(e.created_at), e.run_dir)):
        ci = f"{_pct(e.ci_low)} – {_pct(e.ci_high)}" if e.ci_low is not None else "n/a"
        table.add_row(
            f"{e.created_at:%Y-%m-%d %H:%M}" if e.created_at else "?",
            f"{e.benchmark or e.environment} {e.benchmark_version}",
            e.model,
            e.harness,
            e.verifier_version,
            _pct(e.pass1),
            ci,
            f"{e.scored}/{e.expected}",
            e.run_dir,
        )
    console.print(table)
    for run_dir, why in catalog.skipped:
        console.print(f"skipped {run_dir}: {why}", markup=False, soft_wrap=True)
    sql = f"duckdb {catalog.path} 'SELECT * FROM runs'"
    console.print(f"catalog: {catalog.path} (SQL: {sql})", markup=False, soft_wrap=True)


@runs_app.command("trend")
def runs_trend(
    benchmark: Annotated[str, typer.Argument(help="Benchmark (or environment) name.")],
    root: Root = Path("runs"),
    out: Annotated[
        Path | None, typer.Option(help="HTML file (default ROOT/trend-NAME.html).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """pass@1 with its 95% CI over time for one benchmark, as a table and an HTML chart."""
    from gymflow.history.catalog import refresh
    from gymflow.reports.history import write_trend_report

    catalog = refresh(root)
    entries = catalog.of_benchmark(benchmark)
    if not entries:
        fail(f"no run of {benchmark!r} under {root}")
    path = write_trend_report(out or root / f"trend-{benchmark}.html", benchmark, root, entries)
    if as_json:
        print_json(
            {"benchmark": benchmark, "report": str(path), "runs": [asdict(e) for e in entries]}
        )
        return
    table = Table("when", "model", "version", "verifier", "pass@1", "95% CI", "coverage")
    for e in entries:
        ci = f"{_pct(e.ci_low)} – {_pct(e.ci_high)}" if e.ci_low is not None else "n/a"
        when = f"{e.created_at:%Y-%m-%d %H:%M}" if e.created_at else "?"
        table.add_row(
            when,
            e.model,
            e.benchmark_version,
            e.verifier_version,
            _pct(e.pass1),
            ci,
            f"{e.scored}/{e.expected}",
        )
    console.print(table)
    console.print(f"trend: {path.resolve()}", markup=False, soft_wrap=True)


@runs_app.command("gate")
def runs_gate(
    run_dir: Annotated[Path, typer.Argument(help="The run to gate.")],
    root: Annotated[
        Path | None,
        typer.Option(help="Where earlier runs live (default: the folder holding RUN_DIR)."),
    ] = None,
    baseline: Annotated[Path | None, typer.Option(help="A pinned baseline run.")] = None,
    margin: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Drop (0-1) a regression must exceed.")
    ] = 0.02,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compare RUN_DIR, paired by task, with the run before it and a baseline; exit 2 when a
    significant drop beyond the margin is found. The verdict is kept as RUN_DIR/gate.json, and
    `gym report RUN_DIR` states it."""
    from gymflow.history.gate import gate, save_verdict

    verdict = gate(run_dir, root=root, baseline=baseline, margin=margin)
    save_verdict(verdict)
    if as_json:
        print_json(verdict.as_dict())
    else:
        console.print(verdict.summary(), markup=False, soft_wrap=True)
        console.print(f"test: {verdict.test}", markup=False, soft_wrap=True)
    if not verdict.passed:
        raise typer.Exit(exit_codes.GATE_FAILED)
