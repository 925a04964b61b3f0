"""`gym eval run` and `gym demo`: collect rollouts through the Prefect evaluation loop."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gymflow import progress
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
from gymflow.cli.scale import server_hint_once
from gymflow.config import (
    ConfigError,
    EvalConfig,
    ShardSpec,
    format_validation_error,
    load_config_file,
    merge_overrides,
    parse_config,
)
from gymflow.environments.registry import RegistryError, load_benchmark
from gymflow.flows.parameters import UNSHARDED, ScaleOptions
from gymflow.models.open_files import ensure_open_files
from gymflow.rollouts.plan import RunPlan, resolve
from gymflow.rollouts.stopping import RunStopped
from gymflow.simulated.endpoint import launched_early
from gymflow.store.db import StoreError, connect, store_path
from gymflow.store.merge import check_destination

if TYPE_CHECKING:
    from gymflow.analysis.results import RunAnalysis


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


def build_config(path: Path | None, overrides: dict[str, Any]) -> EvalConfig:
    source = str(path) if path else "command line"
    base = load_config_file(path) if path else {}
    data = merge_overrides(base, overrides)
    if overrides.get("sampling.seed") is not None and "sampling" not in base:
        # `--seed` changes the seed only: the benchmark's other sampling settings stay.
        data["sampling"] = {**_benchmark_sampling(data.get("benchmark")), **data["sampling"]}
    return parse_config(data, source)


def _benchmark_sampling(name: Any) -> dict[str, Any]:
    """The named benchmark's sampling settings; none when it names none or no known one (the
    config's own check then says which)."""
    if not isinstance(name, str):
        return {}
    try:
        return load_benchmark(name).sampling.model_dump()
    except RegistryError:
        return {}


def check_before_run(config: EvalConfig, *, resume: bool) -> RunPlan:
    """Every config or store problem, reported before Prefect or a server starts."""
    plan = resolve(config)
    check_destination(
        config.out, plan.run_id, resume=resume, benchmark_version=plan.benchmark_version
    )
    ensure_open_files(config.concurrency, remote_resources=config.resources_url is not None)
    key = config.model.api_key_env
    if key and not os.environ.get(key):
        # Otherwise every request would go without a key, and fail (or succeed) as someone else.
        raise ConfigError(
            f"model.api_key_env names {key}, which is not set here: export {key}=... (the key "
            "is read from it at run time and never stored)"
        )
    return plan


class _RunFailuresReportedByGym(logging.Filter):
    """On the terminal, a failed flow or task run is the one line `gym` ends with (the exit
    codes' message); Prefect's own record of it, with its traceback, still goes to the API."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.levelno >= logging.ERROR
            and record.name.startswith(("prefect.flow_runs", "prefect.task_runs"))
        )


def _quiet_prefect_console() -> None:
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *map(logging.getLogger, logging.root.manager.loggerDict)]
    for handler in {h for logger in loggers for h in getattr(logger, "handlers", ())}:
        if isinstance(handler, PrefectConsoleHandler):
            handler.addFilter(_RunFailuresReportedByGym())


def run_loop(
    config: EvalConfig,
    *,
    resume: bool,
    scale: ScaleOptions = UNSHARDED,
    retry_failed: bool = True,
) -> dict[str, Any]:
    """Run the evaluation loop flow with a progress bar (after `check_before_run`)."""
    from gymflow.flows.eval_run import evaluation_loop
    from gymflow.flows.lean import without_heartbeat

    _quiet_prefect_console()
    server_hint_once()

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar, without_heartbeat():
        progress.set_listener(_Bar(bar))
        try:
            return evaluation_loop(config, resume, scale, retry_failed)
        finally:
            progress.set_listener(None)


def _stored(plan: RunPlan) -> str:
    """How much of the run its store holds, for the line a stopped run ends with."""
    try:
        with connect(store_path(plan.config.out), read_only=True) as con:
            stored = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
    except StoreError:
        stored = 0
    return f"{plan.config.out} holds {stored} of {len(plan.keys())} rollouts"


def print_headline(result: dict[str, Any]) -> None:
    analysis: RunAnalysis = result["analysis"]
    profile = analysis.profile
    coverage = profile.coverage
    lo, hi = profile.ci95 or (None, None)

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    console.print(
        f"[bold]{profile.benchmark or profile.environment}[/] · {profile.model}"
        f" · run {profile.run_id}"
    )
    if profile.simulated:
        console.print(SIMULATED_LINE, markup=False)
    console.print(f"pass@1 = [bold]{pct(profile.pass_at_1)}[/]  (95% CI {pct(lo)} – {pct(hi)})")
    table = Table("k", "pass@k", "pass^k")
    for k, value in profile.pass_at_k.items():
        table.add_row(k, pct(value), pct(profile.pass_hat_k[k]))
    console.print(table)
    console.print(
        f"coverage: expected {coverage.expected}, scored {coverage.scored}, "
        f"failed {coverage.failed}, missing {coverage.missing} "
        f"(failures {profile.failures})"
    )
    health = analysis.health
    warnings = f" (warnings: {', '.join(health.warnings)})" if health.warnings else ""
    console.print(f"health: {health.verdict}{warnings}", markup=False)
    decision = analysis.decision
    console.print(f"next action: {decision.label or 'none'} ({decision.why})", markup=False)
    console.print(f"verifier version: {profile.verifier_version}", markup=False)
    console.print(f"report: {result['report']}")


def _execute(
    path: Path | None,
    overrides: dict[str, Any],
    resume: bool,
    scale: ScaleOptions = UNSHARDED,
    retry_failed: bool = True,
) -> None:
    config = build_config(path, overrides)
    plan = check_before_run(config, resume=resume)
    prefect_for_run()
    # The local policy server starts while Prefect is imported and the flow run starts.
    with launched_early(plan):
        from prefect.exceptions import CancelledRun  # imports Prefect: only once a run starts

        try:
            result = run_loop(config, resume=resume, scale=scale, retry_failed=retry_failed)
        except RunStopped as exc:
            fail(f"{exc} ({_stored(plan)})", exc.exit_code)
        except CancelledRun as exc:
            fail(f"{exc} ({_stored(plan)})", exit_codes.TERMINATED)
        except KeyboardInterrupt:
            fail(f"stopped at once (signalled twice); {_stored(plan)}", exit_codes.INTERRUPTED)
        except (RegistryError, StoreError) as exc:  # the store or a component failed mid-run
            fail(str(exc), exit_codes.RUNTIME)
    print_headline(result)
    health = result["analysis"].health
    if health.gate == "fail":
        errors.print(
            f"health gate failed ({', '.join(health.gate_failures)}): see "
            f"`gym eval health {config.out}`",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(exit_codes.GATE_FAILED)


@eval_app.command("run")
def eval_run(
    config: Annotated[Path | None, typer.Argument(help="Eval config YAML.")] = None,
    benchmark: Annotated[str | None, typer.Option(help="Benchmark name.")] = None,
    environment: Annotated[str | None, typer.Option(help="Environment name.")] = None,
    repeats: Annotated[int | None, typer.Option(help="Rollouts per task.")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    out: Annotated[str | None, typer.Option(help="Run directory.")] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue a stored run; only missing rollouts.")
    ] = False,
    shard: Annotated[str | None, typer.Option(help="Run only shard I of N, as I/N.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Rollouts in flight.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
    model_kind: Annotated[
        str | None, typer.Option(help="local | responses | chat_completions")
    ] = None,
    model_url: Annotated[str | None, typer.Option(help="Model server base URL (…/v1).")] = None,
    model_name: Annotated[str | None, typer.Option(help="Model name sent to the server.")] = None,
    tool_choice: Annotated[
        str | None,
        typer.Option(help="auto | required | none, sent with the tools (unset: not sent)."),
    ] = None,
    shards: Annotated[
        int, typer.Option(help="Split into N shards, run concurrently here (or on --work-pool).")
    ] = 1,
    work_pool: Annotated[
        str | None, typer.Option(help="Run shards as eval-shard deployment runs on this pool.")
    ] = None,
    shard_root: Annotated[
        str | None, typer.Option(help="Where shard stores live (shared by workers).")
    ] = None,
    shard_retries: Annotated[int, typer.Option(help="Re-runs of a failed shard.")] = 2,
    retry_failed: Annotated[
        bool,
        typer.Option(
            help="With --resume, run again the rollouts that failed for a transient reason "
            "(transport, timeout, rate limit, server error); old attempts are kept."
        ),
    ] = True,
    stop_after_transport_failures: Annotated[
        int | None,
        typer.Option(
            help="Stop early after this many rollouts in a row cannot reach the model or the "
            "resources server."
        ),
    ] = None,
) -> None:
    """Collect rollouts, then check health, profile and write the report."""
    if config is None and benchmark is None and environment is None:
        fail("give a CONFIG file, --benchmark NAME or --environment NAME")
    try:
        shard_spec = ShardSpec.parse(shard).model_dump() if shard else None
        scale = ScaleOptions(
            shards=shards, work_pool=work_pool, shard_root=shard_root, shard_retries=shard_retries
        )
    except ConfigError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(format_validation_error(exc, "command line"))
    overrides = {
        "benchmark": benchmark,
        "environment": environment,
        "repeats": repeats,
        "limit": limit,
        "out": out,
        "shard": shard_spec,
        "concurrency": concurrency,
        "sampling.seed": seed,
        "model.kind": model_kind,
        "model.base_url": model_url,
        "model.name": model_name,
        "model.tool_choice": tool_choice,
        "stop_after_transport_failures": stop_after_transport_failures,
    }
    _execute(config, overrides, resume, scale, retry_failed)


@app.command("demo")
def demo(out: Annotated[str, typer.Option(help="Run directory.")] = "runs/demo") -> None:
    """Run the whole loop on arithmetic-smoke against the local (simulated) policy server."""
    _execute(None, {"benchmark": "arithmetic-smoke", "out": out}, resume=True)
