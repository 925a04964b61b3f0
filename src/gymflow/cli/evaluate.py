"""`gym eval run` and `gym demo`: collect rollouts through the Prefect evaluation loop."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gymflow.cli import exit_codes
from gymflow.cli.app import (
    SIMULATED_LINE,
    app,
    console,
    errors,
    eval_app,
    fail,
    prefect_for_run,
)
from gymflow.cli.config_flags import flag_for, with_config_flags
from gymflow.cli.config_flags import overrides as config_overrides
from gymflow.cli.imports import importing
from gymflow.cli.scale import server_hint_once
from gymflow.core import progress
from gymflow.core.config import (
    ConfigError,
    EvalConfig,
    ShardSpec,
    format_validation_error,
    load_config_file,
    merge_overrides,
    missing_api_key,
    parse_config,
)
from gymflow.core.errors import naming_options
from gymflow.environments.registry import RegistryError, with_benchmark_sampling
from gymflow.flows.parameters import CHECKPOINT_S, SHARD_TIMEOUT_S, UNSHARDED, ScaleOptions
from gymflow.models.open_files import ensure_open_files
from gymflow.present import coverage_text, format_percent, headline_text
from gymflow.present.terminal import print_table, styled, table
from gymflow.rollouts.plan import RunPlan, handed_down, resolve
from gymflow.rollouts.stopping import RunStopped
from gymflow.simulated.endpoint import launched_early
from gymflow.store.db import StoreError, StoreFailure, connect, store_path
from gymflow.store.merge import check_destination
from gymflow.store.queries.rollouts import held_and_failed, stored_count

if TYPE_CHECKING:
    from gymflow.flows.eval_run import RunOutcome


class _Bar:
    """Adapts the collector's progress events to a Rich progress bar on a terminal, and to a
    plain line per second elsewhere (CI logs, scheduled runs), where a bar would not render."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.task_id = bar.add_task("rollouts", total=None)
        self.total = self.done = 0
        self.last_line = 0.0

    def started(self, total: int) -> None:
        self.total = total
        self.bar.update(self.task_id, total=total)

    def advanced(self, count: int) -> None:
        self.done += count
        self.bar.advance(self.task_id, count)
        now = time.monotonic()
        if (
            not console.is_terminal
            and count
            and (now - self.last_line > 1 or self.done == self.total)
        ):
            self.last_line = now
            self.bar.console.print(f"rollouts: {self.done}/{self.total}", highlight=False)

    def said(self, text: str) -> None:
        # stderr, which the live bar redirects above itself on a terminal
        errors.print(styled(("gymflow:", "yellow")), text, highlight=False)


def build_config(path: Path | None, overrides: dict[str, Any]) -> EvalConfig:
    """The config file overlaid with the flags; a problem names the flag that set the field."""
    source = str(path) if path else "command line"
    base = load_config_file(path) if path else {}
    data = with_benchmark_sampling(merge_overrides(base, overrides))
    flags = {key: flag_for(key) for key, value in overrides.items() if value is not None}
    return parse_config(data, source, flags)


def check_before_run(config: EvalConfig, *, resume: bool) -> RunPlan:
    """Every config or store problem, reported before Prefect or a server starts."""
    plan = resolve(config)
    check_destination(
        config.out, plan.run_id, resume=resume, benchmark_version=plan.benchmark_version
    )
    ensure_open_files(config.concurrency, remote_resources=config.resources_url is not None)
    missing = missing_api_key(config.model)
    if missing:
        raise ConfigError(missing)
    return plan


class _ReportedByGym(logging.Filter):
    """On the terminal, a failed flow or task run is the one line `gym` ends with (the exit
    codes' message), and a notice is a line above the progress bar (`_Bar.said`); Prefect's
    own record of either, with a traceback, still goes to the API."""

    def filter(self, record: logging.LogRecord) -> bool:
        failed = record.levelno >= logging.ERROR and record.name.startswith(
            ("prefect.flow_runs", "prefect.task_runs")
        )
        return not (failed or getattr(record, progress.NOTICE, False))


def _quiet_prefect_console() -> None:
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *map(logging.getLogger, logging.root.manager.loggerDict)]
    for handler in {h for logger in loggers for h in getattr(logger, "handlers", ())}:
        if isinstance(handler, PrefectConsoleHandler):
            handler.addFilter(_ReportedByGym())


def run_loop(
    plan: RunPlan,
    *,
    resume: bool,
    scale: ScaleOptions = UNSHARDED,
    retry_failed: bool = True,
) -> RunOutcome:
    """Run the evaluation loop flow with a progress bar on the plan `check_before_run` made:
    handed down to the flow (which takes a config, as the UI and a schedule give it), and its
    tags given to the flow run as Prefect creates it."""
    with importing():
        from prefect import tags

        from gymflow.flows.eval_run import evaluation_loop
        from gymflow.flows.labels import run_tags
        from gymflow.flows.lean import without_heartbeat

    _quiet_prefect_console()
    server_hint_once()

    columns = (
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with (
        Progress(*columns, console=console, transient=False) as bar,
        without_heartbeat(),
        handed_down(plan),
        tags(*run_tags(plan)),
        progress.listening(_Bar(bar)),
        naming_options("flags"),
    ):
        return evaluation_loop(plan.config, resume, scale, retry_failed)


def _stored(plan: RunPlan) -> str:
    """How much of the run its store holds, for the line a stopped run ends with."""
    try:
        with connect(store_path(plan.config.out), read_only=True) as con:
            stored = stored_count(con)
    except (StoreError, StoreFailure):
        stored = 0
    return f"{plan.config.out} holds {stored} of {len(plan.keys())} rollouts"


def _resuming(plan: RunPlan) -> str:
    """What `--resume` will do with the run's folder, said before it starts: a mistyped --out
    must not start a fresh run unannounced where the user meant to continue one."""
    out, expected = plan.config.out, len(plan.keys())
    if not store_path(out).exists():
        return (
            f"--resume: {out} holds no run yet (no {store_path(out).name}), so a new run of "
            f"{expected} rollouts starts there; check --out if you meant to continue one"
        )
    with connect(store_path(out), read_only=True) as con:
        stored, failed = held_and_failed(con)
    if stored >= expected and not failed:
        return (
            f"nothing to collect: {out} already holds all {expected} rollouts; health, profile "
            "and the report are brought up to date"
        )
    return f"resuming {out}: {stored} of {expected} rollouts stored ({failed} failed)"


def print_headline(result: RunOutcome) -> None:
    analysis = result.analysis
    profile = analysis.profile
    console.print(
        styled(
            (profile.benchmark or profile.environment, "bold"),
            f" · {profile.model} · run {profile.run_id}",
        )
    )
    if profile.simulated:
        console.print(SIMULATED_LINE)
    console.print(styled((headline_text(profile), "bold")))
    grid = table("k", "pass@k", "pass^k")
    for k, value in profile.pass_at_k.items():
        grid.add_row(k, format_percent(value), format_percent(profile.pass_hat_k[k]))
    print_table(console, grid)
    console.print(f"coverage: {coverage_text(profile.coverage)} (failures {profile.failures})")
    health = analysis.health
    warnings = f" (warnings: {', '.join(health.warnings)})" if health.warnings else ""
    console.print(f"health: {health.verdict}{warnings}")
    decision = analysis.decision
    console.print(f"next action: {decision.label or 'none'} ({decision.why})")
    console.print(f"verifier version: {profile.verifier_version}")
    console.print(f"report: {result.report}")


def _execute(
    path: Path | None,
    overrides: dict[str, Any],
    resume: bool,
    scale: ScaleOptions = UNSHARDED,
    retry_failed: bool = True,
) -> None:
    config = build_config(path, overrides)
    plan = check_before_run(config, resume=resume)
    if resume and scale.shards == 1 and config.shard.count == 1:
        console.print(_resuming(plan))
    prefect_for_run()
    # The local policy server starts while Prefect is imported and the flow run starts.
    with launched_early(plan):
        from prefect.exceptions import CancelledRun  # imports Prefect: only once a run starts

        from gymflow.flows.eval_run import UnhealthyRun

        try:
            result = run_loop(plan, resume=resume, scale=scale, retry_failed=retry_failed)
        except UnhealthyRun as exc:  # its flow run ended Failed; the gate's line follows
            result = exc.result
        except RunStopped as exc:
            fail(f"{exc} ({_stored(plan)})", exc.exit_code)
        except CancelledRun as exc:
            fail(f"{exc} ({_stored(plan)})", exit_codes.TERMINATED)
        except KeyboardInterrupt:
            fail(f"stopped at once (signalled twice); {_stored(plan)}", exit_codes.INTERRUPTED)
        except (RegistryError, StoreError, StoreFailure) as exc:  # failed mid-run
            fail(str(exc), exit_codes.RUNTIME)
    print_headline(result)
    health = result.analysis.health
    if health.gate == "fail":
        errors.print(
            f"health gate failed ({', '.join(health.gate_failures)}): see "
            f"`gym eval health {config.out}`",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(exit_codes.GATE_FAILED)


@eval_app.command("run")
@with_config_flags
def eval_run(
    config: Annotated[Path | None, typer.Argument(help="Eval config YAML.")] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue a stored run; only missing rollouts.")
    ] = False,
    shard: Annotated[str | None, typer.Option(help="Run only shard I of N, as I/N.")] = None,
    shards: Annotated[
        int, typer.Option(help="Split into N shards, run concurrently here (or on --work-pool).")
    ] = 1,
    work_pool: Annotated[
        str | None, typer.Option(help="Run shards as eval-shard deployment runs on this pool.")
    ] = None,
    shard_root: Annotated[
        str | None,
        typer.Option(
            help="Where shard stores live: a folder, or a URL every worker reaches "
            "(s3://bucket/prefix, gs://…, file://…; credentials from AWS_* and the like)."
        ),
    ] = None,
    shard_retries: Annotated[int, typer.Option(help="Re-runs of a failed shard.")] = 2,
    shard_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for a shard on --work-pool before it is retried "
            f"(default {SHARD_TIMEOUT_S:.0f})."
        ),
    ] = None,
    checkpoint_s: Annotated[
        float | None,
        typer.Option(
            help=f"Seconds between a URL shard's checkpoints (default {CHECKPOINT_S:.0f})."
        ),
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            help="With --resume, run again the rollouts that failed for a transient reason "
            "(transport, timeout, rate limit, server error); old attempts are kept."
        ),
    ] = True,
    **flags: Any,
) -> None:
    """Collect rollouts, then check health, profile and write the report."""
    if config is None and flags["benchmark"] is None and flags["environment"] is None:
        fail("give a CONFIG file, --benchmark NAME or --environment NAME")
    try:
        shard_spec = ShardSpec.parse(shard).model_dump() if shard else None
        timings = {"shard_timeout_s": shard_timeout, "checkpoint_s": checkpoint_s}
        scale = ScaleOptions.model_validate(
            {
                "shards": shards,
                "work_pool": work_pool,
                "shard_root": shard_root,
                "shard_retries": shard_retries,
                **{key: value for key, value in timings.items() if value is not None},
            }
        )
    except ConfigError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(format_validation_error(exc, "command line"))
    overrides = {**config_overrides(flags), "shard": shard_spec}
    _execute(config, overrides, resume, scale, retry_failed)


@app.command("demo")
def demo(out: Annotated[str, typer.Option(help="Run directory.")] = "runs/demo") -> None:
    """Run the whole loop on arithmetic-smoke against the local (simulated) policy server."""
    # A second demo continues the first (and says there is nothing to collect).
    _execute(None, {"benchmark": "arithmetic-smoke", "out": out}, resume=store_path(out).exists())
