"""`gym study`: a baseline and variants that each change one factor, run and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gymflow.cli import exit_codes
from gymflow.cli.app import SIMULATED_LINE, app, console, fail, prefect_for_run, print_json
from gymflow.store.db import StoreError

study_app = typer.Typer(
    help="Ablation studies: vary one thing at a time against a baseline.", no_args_is_help=True
)
app.add_typer(study_app, name="study")


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} pp"


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
            console.print(f"{arm.name}: {what} ({how})", markup=False, soft_wrap=True)
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
    pass1 = "n/a" if base["pass1"] is None else f"{100 * base['pass1']:.1f}%"
    console.print(f"study {result['name']}: baseline pass@1 {pass1}", markup=False)
    arms = [base, *(v["summary"] for v in result["variants"])]
    if any(arm["simulated"] for arm in arms):
        names = ", ".join(arm["name"] for arm in arms if arm["simulated"])
        console.print(f"{SIMULATED_LINE} (arms: {names})", markup=False, soft_wrap=True)
    columns = ("variant", "isolates", "difference", "95% CI", "p (Holm)", "gained/lost", "health")
    table = Table(*columns)
    for v in result["variants"]:
        s = v["summary"]
        ci = v["ci95"]
        table.add_row(
            s["name"],
            s["isolates"] or "confounded",
            _pp(v["difference"]),
            f"{_pp(ci[0])} to {_pp(ci[1])}" if ci else "n/a",
            "n/a" if v["p_holm"] is None else f"{v['p_holm']:.3g}",
            f"{len(v['gained'])}/{len(v['lost'])}",
            s["health"],
        )
    console.print(table)
    console.print(f"p-values: {result['test']}", markup=False, soft_wrap=True)
    console.print(f"report: {Path(result['report']).resolve()}", markup=False, soft_wrap=True)
