"""`gym study`: a baseline and variants that each change one factor, run and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli import exit_codes
from gymflow.cli.app import SIMULATED_LINE, console, fail, group, prefect_for_run, print_json
from gymflow.present import format_interval, format_number, format_percent, format_points
from gymflow.present.terminal import print_table, table
from gymflow.store.db import StoreError

study_app = group("study")


@study_app.command("run")
def study_run(
    study_file: Annotated[Path, typer.Argument(help="Study YAML: baseline and variants.")],
    check: Annotated[
        bool, typer.Option("--check", help="Only check the study and list its arms.")
    ] = False,
    shards: Annotated[int, typer.Option(min=1, help="Shards per arm, run here.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Run the baseline and every variant (concurrently, resumable), then write study.html."""
    from gymflow.study.spec import read_spec, resolve_study, store_of

    spec = read_spec(study_file)
    plan = resolve_study(spec, str(study_file))
    if check:
        stores = store_of(plan)
        for arm in (plan.baseline, *plan.variants):
            what = "baseline" if arm is plan.baseline else (arm.isolates or "confounded")
            if arm.keys:
                what += f" ({', '.join(arm.keys)})"
            how = f"rollouts in {stores[arm.name]}"
            if arm.reverify_only:
                how = f"the baseline's rollouts judged again in {stores[arm.name]}"
            console.print(f"{arm.name}: {what} ({how})")
        return
    prefect_for_run()
    from gymflow.flows.parameters import ScaleOptions
    from gymflow.flows.study import study

    try:
        result = study(spec, ScaleOptions(shards=shards))
    except StoreError as exc:
        fail(str(exc), exit_codes.RUNTIME)
    if as_json:
        print_json(result)
        return
    base = result["baseline"]
    console.print(f"study {result['name']}: baseline pass@1 {format_percent(base['pass1'])}")
    arms = [base, *(v["summary"] for v in result["variants"])]
    if any(arm["simulated"] for arm in arms):
        names = ", ".join(arm["name"] for arm in arms if arm["simulated"])
        console.print(f"{SIMULATED_LINE} (arms: {names})")
    columns = (
        "variant",
        "isolates",
        "difference",
        "95% CI (simultaneous)",
        "p (Bonferroni)",
        "gained/lost",
        "health",
    )
    grid = table(*columns, keys=("variant",))
    for v in result["variants"]:
        s = v["summary"]
        grid.add_row(
            s["name"],
            s["isolates"] or "confounded",
            format_points(v["difference"]),
            format_interval(v["ci95"], each=format_points, between=" to "),
            format_number(v["p_adjusted"]),
            f"{len(v['gained'])}/{len(v['lost'])}",
            s["health"],
        )
    print_table(console, grid)
    for v in result["variants"]:
        if v.get("harness"):
            console.print(f"{v['summary']['name']}: {v['harness']}", markup=False, soft_wrap=True)
    console.print(f"test: {result['test']}")
    console.print(f"report: {Path(result['report']).resolve()}")
