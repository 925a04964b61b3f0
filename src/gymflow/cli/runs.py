"""`gym runs`: the history of the runs under a folder, their trend, and the regression gate."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gymflow.cli import exit_codes
from gymflow.cli.app import console, errors, fail, group, print_json
from gymflow.present import format_interval, format_percent
from gymflow.present.terminal import print_table, styled, table

if TYPE_CHECKING:
    from gymflow.history.catalog import CatalogEntry

runs_app = group("runs")

Root = Annotated[Path, typer.Option(help="Folder holding the run folders (searched below).")]


def _shown(path: str) -> str:
    """A run folder as a user types it here: relative to the working folder when under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _benchmark(entry: CatalogEntry) -> str:
    """Benchmark and version; an import without one is named by its environment."""
    name = entry.benchmark or entry.environment or "unknown"
    return f"{name} {entry.benchmark_version}" if entry.benchmark_version else name


def _ci(entry: CatalogEntry) -> str:
    bounds = None if entry.ci_low is None else (entry.ci_low, entry.ci_high)
    return format_interval(bounds)


def _pass1(entry: CatalogEntry) -> str:
    return "seals fail" if entry.seals == "edited" else format_percent(entry.pass1)


def _edited(entry: CatalogEntry) -> str:
    """The line saying why a run's numbers are not shown."""
    return (
        f"seals fail {_shown(entry.run_dir)}: {entry.seals_edited}; its pass@1 is not shown "
        f"(gym eval health {_shown(entry.run_dir)})"
    )


@runs_app.command("list")
def runs_list(
    root: Annotated[Path, typer.Argument(help="Folder holding the run folders.")] = Path("runs"),
    benchmark: Annotated[str | None, typer.Option(help="Only this benchmark.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Every run under ROOT with its factors and headline. Nothing is written under ROOT: the
    catalog is a DuckDB file in the user's cache folder (its path is printed) that any SQL
    client can query (table `runs`)."""
    from gymflow.history.catalog import refresh

    catalog = refresh(root)
    entries = catalog.of_benchmark(benchmark) if benchmark else catalog.entries
    if as_json:
        print_json(
            {
                "catalog": str(catalog.path) if catalog.path else None,
                "runs": [asdict(e) for e in entries],
                "skipped": [{"run_dir": d, "why": why} for d, why in catalog.skipped],
            }
        )
        return
    columns = ("when", "benchmark", "model", "harness", "verifier", "pass@1", "95% CI", "scored")
    grid = table(*columns, "run", keys=("run",))
    for e in sorted(entries, key=lambda e: (str(e.created_at), e.run_dir)):
        grid.add_row(
            f"{e.created_at:%Y-%m-%d %H:%M}" if e.created_at else "?",
            _benchmark(e),
            e.model,
            e.harness,
            e.verifier_version,
            _pass1(e),
            _ci(e),
            f"{e.scored}/{e.expected}",
            _shown(e.run_dir),
        )
    print_table(console, grid)
    for e in entries:
        if e.seals == "edited":
            console.print(_edited(e))
    for run_dir, why in catalog.skipped:
        console.print(f"skipped {_shown(run_dir)}: {why}")
    if catalog.path is None:
        return
    # The duckdb Python package is installed with gymflow; its command-line tool may not be.
    query = (
        f"import duckdb; duckdb.connect({json.dumps(str(catalog.path))}, read_only=True)"
        '.sql("SELECT * FROM runs").show()'
    )
    console.print(f"catalog: {catalog.path}; query it with SQL:")
    console.print(f"  python -c {shlex.quote(query)}")


@runs_app.command("trend")
def runs_trend(
    benchmark: Annotated[str, typer.Argument(help="Benchmark (or environment) name.")],
    root: Root = Path("runs"),
    out: Annotated[
        Path | None, typer.Option(help="HTML file (default ROOT/trend-NAME.html).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Only the runs of this model.")] = None,
    arm: Annotated[
        str | None,
        typer.Option(help="Only the runs in folders of this name (a study's arm, e.g. baseline)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """pass@1 with its 95% CI over time for one benchmark, as a table and an HTML chart. Runs
    of different models, harnesses, prompts or sampling are different policies: the trend says
    which it mixes; --model and --arm narrow it."""
    from gymflow.history.catalog import mixed_factors, refresh
    from gymflow.history.counted import sealed_here
    from gymflow.reports.history import write_trend_report

    catalog = refresh(root)
    found = catalog.of_benchmark(benchmark, model=model, arm=arm)
    # a run whose seals fail is left out of the trend, never drawn with its stored numbers;
    # so is one not sealed where it is (a copy or link put into the root), as the gate does
    left_out = [e for e in found if e.seals == "edited"]
    here = sealed_here([e for e in found if e.seals != "edited"])
    entries = here.runs
    for e in left_out:
        errors.print(styled(("left out:", "bold yellow")), _edited(e), highlight=False)
    for left in here.left_out:
        errors.print(styled(("left out:", "bold yellow")), _shown(left.entry.run_dir),
                     f"({left.why})", highlight=False)  # fmt: skip
    for run_dir, why in catalog.skipped:  # a store that cannot be read never stops the trend
        errors.print(styled(("skipped:", "bold yellow")), f"{_shown(run_dir)}: {why}")
    if not entries:
        narrowed = "".join(
            f" with {flag} {value}" for flag, value in (("--model", model), ("--arm", arm)) if value
        )
        unread = " and".join(
            [
                *([f" whose seals hold ({len(left_out)} fail)"] if left_out else []),
                *([f" sealed where it is ({len(here.left_out)} not)"] if here.left_out else []),
            ]
        )
        fail(f"no run of {benchmark!r}{unread} under {root}{narrowed}")
    mixed = mixed_factors(entries)
    path = write_trend_report(
        out or root / f"trend-{benchmark}.html", benchmark, root, entries, mixed
    )
    if as_json:
        print_json(
            {
                "benchmark": benchmark,
                "report": str(path),
                "mixed": mixed,
                "runs": [asdict(e) for e in entries],
                "left_out": [
                    *(
                        {"run_dir": e.run_dir, "why": f"seals fail: {e.seals_edited}"}
                        for e in left_out
                    ),
                    *({"run_dir": x.entry.run_dir, "why": x.why} for x in here.left_out),
                ],
                "skipped": [{"run_dir": d, "why": why} for d, why in catalog.skipped],
            }
        )
        return
    if mixed:
        listed = "; ".join(f"{len(v)} {name} ({', '.join(v)})" for name, v in mixed.items())
        errors.print(
            styled(("warning:", "bold yellow")),
            f"this trend mixes {listed}: narrow it with --model or --arm",
            highlight=False,
        )
    grid = table("when", "model", "version", "verifier", "pass@1", "95% CI", "coverage")
    for e in entries:
        when = f"{e.created_at:%Y-%m-%d %H:%M}" if e.created_at else "?"
        grid.add_row(
            when,
            e.model,
            e.benchmark_version or "none",
            e.verifier_version,
            format_percent(e.pass1),
            _ci(e),
            f"{e.scored}/{e.expected}",
        )
    print_table(console, grid)
    console.print(f"trend: {path.resolve()}")


@runs_app.command("gate")
def runs_gate(
    run_dir: Annotated[Path, typer.Argument(help="The run to gate.")],
    root: Annotated[
        Path | None,
        typer.Option(help="Where earlier runs live (default: the folder holding RUN_DIR)."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="The baseline run, when the root has no pinned one (`gym runs pin`; default: "
            "the earliest run under --root that this machine sealed where it is)."
        ),
    ] = None,
    margin: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Drop (0-1) a regression must exceed.")
    ] = 0.02,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compare RUN_DIR, paired by task, with the baseline pinned for the root (`gym runs pin`),
    and feed the paired t statistic to a CUSUM over the runs since the baseline; exit 2 when it
    alarms on a drop beyond the margin, or when the pinned store is missing or another store is
    at its path. Unpinned, it says which run it chose. The verdict is kept as
    RUN_DIR/gate.json, and `gym report RUN_DIR` states it."""
    from gymflow.history.gate import gate, save_verdict

    verdict = gate(run_dir, root=root, baseline=baseline, margin=margin)
    save_verdict(verdict)
    if as_json:
        print_json(verdict.as_dict())
    else:
        console.print(verdict.summary(), highlight=False)
        if verdict.baseline is not None and not verdict.baseline.refused:  # else the line above
            console.print(verdict.baseline.line(), highlight=False)
        console.print(f"test: {verdict.test}")
    if not verdict.passed:
        raise typer.Exit(exit_codes.GATE_FAILED)


@runs_app.command("pin")
def runs_pin(
    baseline: Annotated[
        Path | None, typer.Argument(help="The run to pin (omit to show the root's pin).")
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option(
            help="The root whose gates compare with it (default: the folder holding BASELINE)."
        ),
    ] = None,
    remove: Annotated[
        bool, typer.Option("--remove", help="Remove the root's pin: gates choose the earliest run.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Pin BASELINE as the baseline of every `gym runs gate` under ROOT, by its store's id: its
    seals are checked in full first, and the record (root, run folder, store id, generation,
    when) is kept owner-only beside the seal key, under the key's MAC. A gate whose pinned store
    is missing, moved or replaced fails (exit 2), naming the record; it never falls back to
    another run. Without BASELINE: show the root's pin and whether it holds (exit 2 if not)."""
    from gymflow.history.gate import pin
    from gymflow.history.pins import BaselineChoice, pin_file, pinned_baseline, remove_pin

    if baseline is None and root is None:
        fail("give the run to pin, or --root to show or --remove its pin")
    if remove and baseline is not None:
        fail("--remove takes no BASELINE: `gym runs pin --root ROOT --remove`")
    where = Path(os.path.abspath(root or (baseline or Path()).resolve().parent))
    if remove:
        removed = remove_pin(where)
        if as_json:
            print_json({"root": str(where), "removed": [str(f) for f in removed]})
        else:
            said = ", ".join(map(str, removed)) if removed else "none was recorded"
            console.print(f"unpinned {where}: {said}", highlight=False)
        return
    if baseline is not None:
        made, before = pin(baseline, root=where)
        replaced = before.pin.baseline if before.pin is not None else None
        if as_json:
            record = str(pin_file(made.root))
            print_json({"pinned": asdict(made), "record": record, "replaced": replaced})
            return
        console.print(
            f"pinned {made.baseline} as the baseline of every gate under {where}: store id "
            f"{made.store_id}, generation {made.generation}, {made.pinned_at}",
            highlight=False,
        )
        if before.refused or replaced is not None:
            console.print(f"replaces: {replaced or before.refused}", highlight=False)
        return
    choice = pinned_baseline(where, None)
    shown = choice or BaselineChoice.unpinned(where, None, "no baseline pinned under this root")
    if as_json:
        print_json(asdict(shown))
    else:
        console.print(shown.line(), highlight=False)
    if shown.refused:
        raise typer.Exit(exit_codes.GATE_FAILED)
