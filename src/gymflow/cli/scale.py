"""`gym eval aggregate` (merge shard stores) and `gym server` (how to run Prefect for a team)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gymflow.cli import exit_codes, local_prefect
from gymflow.cli.app import app, console, errors, eval_app, fail, print_json

if TYPE_CHECKING:
    from gymflow.store.merge import MergeReport
from gymflow.present import format_value
from gymflow.present.terminal import print_table, styled, table

_TEAM_SETUP = """\
For a team (history, the UI, Retry buttons, schedules, work pools):

  prefect server start --host 0.0.0.0 --port 4200          # one machine, keep it running
  export PREFECT_API_URL=http://SERVER:4200/api            # every machine and shell
  prefect work-pool create gymflow-process --type process  # once
  export PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30              # each worker machine: heartbeats
  GYMFLOW_CHECKOUT=$PWD prefect worker start --pool gymflow-process   # each worker machine
  gym server --crash-silent-runs                           # once: a dead host's runs end Crashed
  prefect --no-prompt deploy --all                         # from this checkout (prefect.yaml)
  gym serve reports --root . --port 8200                   # reports for the UI's links
  export GYMFLOW_REPORTS_URL=http://SERVER:8200            # where workers' links point"""

#: Shown at most once per Prefect home, the first time a run uses Prefect's ephemeral mode.
SERVER_HINT = f"""\
gymflow is using Prefect's ephemeral mode (PREFECT_API_URL is not set): a temporary API server
per command, which keeps little run history and costs each command several seconds.

On one machine: `gym server --start` starts a local Prefect server in the background that every
later gym command reuses, with a report server beside it for the Prefect UI's report links
(`gym server --stop` stops both).

{_TEAM_SETUP}

`gym server` prints this again."""

_HINT_MARKER = "gymflow-server-hint-shown"


def server_hint_once() -> None:
    """Print SERVER_HINT on stderr if runs go to an ephemeral server and it was never shown."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
    marker = local_prefect.own_home() / _HINT_MARKER
    if marker.exists():
        return
    errors.print(SERVER_HINT, highlight=False, markup=False, soft_wrap=True)
    local_prefect.write_file(marker, b"")


def _connected(api_url: str) -> str:
    """One line on the server at PREFECT_API_URL: reachable (and its version) or not."""
    import httpx

    try:
        reply = httpx.get(f"{api_url.rstrip('/')}/admin/version", timeout=5)
    except httpx.HTTPError as exc:
        return (
            f"gymflow is set to use the Prefect server at {api_url} (PREFECT_API_URL), which "
            f"does not answer: {type(exc).__name__}: {exc}"
        )
    if not reply.is_success:
        return (
            f"gymflow is set to use the Prefect server at {api_url} (PREFECT_API_URL), which "
            f"answers HTTP {reply.status_code}"
        )
    return (
        f"gymflow is connected to the Prefect server at {api_url} (PREFECT_API_URL), version "
        f"{reply.json()}. Runs, Retry buttons, schedules and work pools live there."
    )


@app.command("server")
def server(
    start: Annotated[
        bool, typer.Option("--start", help="Start a local Prefect server every gym reuses.")
    ] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the local server.")] = False,
    crash_silent_runs: Annotated[
        bool,
        typer.Option(
            "--crash-silent-runs",
            help="Create (once) the automation that marks a flow run Crashed when its worker's "
            "heartbeats stop (PREFECT_FLOWS_HEARTBEAT_FREQUENCY): a dead host's shards are "
            "then retried on another worker.",
        ),
    ] = False,
    reports_root: Annotated[
        Path | None,
        typer.Option(
            help="With --start: the folder whose reports the report server serves "
            "(default: the working folder)."
        ),
    ] = None,
) -> None:
    """Which Prefect server runs go to, and how to start a persistent one and a worker, so a
    team keeps run history. Plain lines (no wrapping), so they copy as they are. `--start`
    starts one on 127.0.0.1 in the background that every later gym command of this
    PREFECT_HOME uses (no ephemeral server per command), with a report server beside it for
    the UI's report links; `--stop` stops both."""
    if start and stop:
        fail("give --start or --stop, not both")
    if crash_silent_runs:
        local_prefect.adopt()
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            fail(
                "--crash-silent-runs needs the team's Prefect server: set PREFECT_API_URL (or "
                "start one with `gym server --start`)"
            )
        from gymflow.flows.heartbeats import SILENT_S
        from gymflow.flows.heartbeats import crash_silent_runs as create

        automation, made = create()
        console.print(
            f"automation {automation.name!r} ({automation.id}) "
            + ("created" if made else "exists already")
            + f": a flow run silent for {SILENT_S} s (no heartbeat) is marked Crashed",
            markup=False,
            soft_wrap=True,
        )
        return
    if stop:
        stopped = local_prefect.stop()
        said = (
            f"stopped the local Prefect server at {stopped.api_url} and the report server at "
            f"{stopped.reports.url}"
            if stopped
            else "no local Prefect server was running"
        )
        console.print(said, markup=False, soft_wrap=True)
        return
    if start:
        if reports_root is not None and not reports_root.is_dir():
            fail(f"--reports-root {reports_root}: not a folder")
        local, _ = local_prefect.start(reports_root)
        console.print(
            f"local Prefect server: {local.api_url} (pid {local.prefect.pid}, log {local.log}); "
            "every gym command of this PREFECT_HOME now uses it; its UI is at "
            f"{local.api_url.removesuffix('/api')}; the reports under {local.reports_root} are "
            f"served at {local.reports.url}. Stop both with `gym server --stop`.",
            markup=False,
            soft_wrap=True,
        )
        return
    local_prefect.adopt()
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    text = SERVER_HINT if not api_url else f"{_connected(api_url)}\n\n{_TEAM_SETUP}"
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def _print_report(report: MergeReport, max_missing: int) -> None:
    grid = table("shard store", "shards", "rollouts", keys=("shard store",))
    for shard in report.merged:
        grid.add_row(str(shard.path.parent), ",".join(map(str, shard.indices)), str(shard.rollouts))
    print_table(console, grid)
    added = ", ".join(f"{name} +{n}" for name, n in report.added.items())
    console.print(f"run {report.run_id} → {report.run_dir}: {added}")
    console.print(
        f"stored {report.stored} of {report.expected} rollouts; shards present "
        f"{report.shards_present or 'none'} of {report.shard_count}"
    )
    if report.complete:
        console.print(styled(("complete", "bold green"), ": no (task_id, repeat_index) is missing"))
        return
    console.print(
        styled(
            (f"missing {len(report.missing)}", "bold yellow"),
            " (task_id, repeat_index) pairs"
            + (
                f"; shards with no store: {format_value(report.shards_missing)}"
                if report.shards_missing
                else ""
            ),
        )
    )
    for task_id, repeat in report.missing[:max_missing]:
        console.print(f"  {task_id} #{repeat}", highlight=False)
    if len(report.missing) > max_missing:
        console.print(f"  … and {len(report.missing) - max_missing} more (--json lists them)")


@eval_app.command("aggregate")
def eval_aggregate(
    shard_dirs: Annotated[
        list[str],
        typer.Argument(
            help="Shard run directories (or their .duckdb files), or shard root URLs: a "
            "shard's URL, or a run's folder under the shard root (every committed shard in it)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Run directory to merge into.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    strict: Annotated[
        bool, typer.Option(help="Exit 2 if any (task_id, repeat_index) is still missing.")
    ] = False,
    max_missing: Annotated[int, typer.Option(help="Missing pairs to list.")] = 20,
) -> None:
    """Merge shard stores into a run store. Idempotent; a shard of another config or benchmark
    version is refused and nothing is written; lists the (task_id, repeat_index) pairs missing.
    A URL's shards are read from their committed results, each file checked against its
    checksum."""
    # DuckDB and the store: not for `gym server`
    from gymflow.rollouts.merge import merge_shards
    from gymflow.rollouts.published import fetched

    with fetched(shard_dirs, skip_missing=False) as stores:
        report = merge_shards(out, stores)
    if json_output:
        print_json(report.as_dict(max_missing=len(report.missing)))
    else:
        _print_report(report, max_missing)
    if strict and not report.complete:
        raise typer.Exit(exit_codes.GATE_FAILED)
