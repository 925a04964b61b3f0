"""The evaluation loop as a Prefect flow (the `eval-run` deployment): collect (in one store, or
fanned out over shards here or on a work pool, then aggregated), check health, profile, report."""

from __future__ import annotations

import signal
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from uuid import uuid4

from prefect import get_run_logger
from prefect.exceptions import TerminationSignal
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.states import Cancelled, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from gymflow.analysis.results import RunAnalysis
from gymflow.core import progress
from gymflow.core.config import ConfigError, EvalConfig
from gymflow.core.errors import GateFailed, naming_options
from gymflow.flows import run_log
from gymflow.flows.artifacts import publish_results, publish_retrying, publish_shard_failure
from gymflow.flows.cancellation import cancelling, end_cancelled, stop_on_cancel, supervised
from gymflow.flows.eval_shard import collect_plan
from gymflow.flows.fan_out import (
    ShardFailed,
    loopback_urls,
    publish_beside_shards,
    run_shard_here,
    run_shard_on_pool,
    shard_deployment,
    shard_options,
)
from gymflow.flows.labels import run_name, tag_run
from gymflow.flows.lean import flow
from gymflow.flows.parameters import UNSHARDED, FlowConfig, ScaleOptions, run_root, shard_config
from gymflow.flows.progress import RunProgress
from gymflow.rollouts import stopping
from gymflow.rollouts.collection import (
    collections_at,
    flow_run_collection,
    legacy_shards_at,
    recorded_collection,
)
from gymflow.rollouts.outcomes import BatchOutcome, ShardOutcome
from gymflow.rollouts.plan import RunPlan, plan_of
from gymflow.simulated.endpoint import model_endpoint
from gymflow.steps.analysis import analyse_store, render_report
from gymflow.steps.rollouts import retry_unless_stopped
from gymflow.steps.shards import aggregate_shards, supersede_failed_in_shards
from gymflow.store.compact import compact
from gymflow.store.merge import MergeReport, check_destination
from gymflow.store.remote import is_url

#: Threads for local shards and pool-shard waiters: each local shard holds one while it runs.
MAX_CONCURRENT_SHARDS = 32


def placed(config: EvalConfig) -> EvalConfig:
    """`out` may hold `{date}`, the run's scheduled UTC date (a nightly run gets its own store),
    and `{flow_run_id}`, this flow run's id (every run from a form gets its own store, however
    many start on a day). A retry of the flow run keeps both, so it finds the same store."""
    out = config.out
    if "{date}" in out:
        when = flow_run.scheduled_start_time or datetime.now(UTC)
        out = out.replace("{date}", f"{when:%Y-%m-%d}")
    if "{flow_run_id}" in out:
        out = out.replace("{flow_run_id}", str(flow_run.id or uuid4()))
    return config if out == config.out else config.model_copy(update={"out": out})


def collecting(config: EvalConfig, run_id: str, scale: ScaleOptions, resume: bool) -> ScaleOptions:
    """`scale` with the collection this flow run's shards belong to, said to the user. Given
    (a continuation that names it): that one. With `resume` (the user's `--resume`, not a
    retry): the collection the run store at `out` was merged from, else the latest of the run
    at the shard root, else (said so) a new one. Otherwise a new collection, named after this
    flow run (its scheduled time and id), so a Prefect retry of the flow run names it again
    and resumes it, while another invocation of the same config never restores its shards."""
    if not scale.sharded or scale.collection:
        return scale
    root = run_root(config, scale, run_id)
    recorded = recorded_collection(config.out) if resume else None
    found = collections_at(root) if resume and recorded is None else []
    if recorded is not None or found:
        collection = recorded or found[-1]
        where = f"the one {config.out} was merged from" if recorded else "the latest"
        progress.say(f"resuming collection {collection} of run {run_id} ({where}, at {root})")
        return scale.model_copy(update={"collection": collection})
    collection = flow_run_collection(flow_run.scheduled_start_time, flow_run.id)
    if resume:
        legacy = legacy_shards_at(root)
        earlier = (
            f"; {root} holds shards of an earlier gymflow (no collection): not continued, "
            f"merge them by hand (`gym eval aggregate {' '.join(legacy)} --out DIR`)"
            if legacy
            else ""
        )
        progress.say(
            f"--resume: no collection of run {run_id} at {root} to continue, so a new "
            f"collection {collection} starts{earlier}"
        )
    else:
        progress.say(f"collection {collection} of run {run_id}: its shards at {root}/{collection}")
    return scale.model_copy(update={"collection": collection})


def resuming(resume: bool) -> bool:
    """A retry of this flow run (the UI's Retry button) continues it, as `--resume` would."""
    return resume or (flow_run.run_count or 1) > 1


@flow(
    name="eval-run",
    flow_run_name=run_name,
    log_prints=True,
    task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENT_SHARDS),
)
def evaluation_loop(
    config: FlowConfig,
    resume: bool = False,
    scale: ScaleOptions = UNSHARDED,
    retry_failed: bool = True,
) -> RunOutcome:
    """Collect every missing rollout of the config's run, then health, profile, diagnosis and
    report. A run that fails its health gate ends Failed (`UnhealthyRun`).

    SIGINT, SIGTERM or a cancellation of this flow run stops it: finished rollouts are
    committed, the rest are left for a resume (the run ends Cancelled when cancelled).

    Args:
        config: What to run, against which policy, how often, and where results go.
        resume: Continue a stored run: only its missing rollouts run. A retry of this flow run
            (the UI's Retry button) always continues it.
        scale: Split the run into shards, run here as concurrent subflows or on a work pool,
            then merged into the run store.
        retry_failed: When resuming, run again the rollouts whose last attempt failed for a
            transient reason (transport, timeout, rate limit, server error); the failed
            attempts are kept in the store as evidence.
    """
    result = run_evaluation(config, resume, scale, retry_failed)
    return result if isinstance(result, State) else health_gated(result)


def run_evaluation(
    config: EvalConfig, resume: bool, scale: ScaleOptions, retry_failed: bool
) -> RunOutcome | State:
    """The evaluation loop in the calling flow run (eval-run's, or nightly's, whose own page so
    shows the run's progress, summary and report link): its outcome, or Cancelled."""
    stopping.clear()
    config = placed(config)
    plan = plan_of(config)  # the one plan of this run: every stage below reads it
    tag_run(plan)
    # before `resuming`: a retry of a new collection's flow run continues that collection
    scale = collecting(config, plan.run_id, scale, resume)
    resume = resuming(resume)
    try:
        with (
            naming_options("form", unless_set=True),
            stopping.stop_on_signals(),
            stop_on_cancel(),
        ):
            if (flow_run.run_count or 1) > 1:
                publish_retrying(flow_run.run_count)
            batches, shards, merged = (), (), None
            if scale.sharded:
                if config.shard.count > 1:
                    raise ConfigError(
                        "give either shard (run one shard) or scale.shards (run them all)"
                    )
                shards, merged = _collect_shards(plan, scale, resume, retry_failed)
            else:
                batches = _collect_here(plan, resume, retry_failed)
            stopping.raise_if_requested()
            # The run's writes are done: its store gives back the blocks its commits freed.
            compact(config.out)
            outcome = analyse_run(config.out)
            outcome = replace(
                outcome,
                batches=batches,
                shards=shards,
                aggregate=merged,
                collection=scale.collection,
            )
            if scale.shard_root and is_url(scale.shard_root):
                publish_beside_shards(config, scale.shard_root, scale.collection)
            return outcome
    except stopping.RunStopped as exc:
        if exc.cause == "signal" and supervised():
            if cancelling():
                # The worker's SIGTERM for a Cancel in the UI. A Cancelled state returned from
                # here would make Prefect's engine end the process on a CancelledRun error
                # (logged as unexpected, exit 1); its Abort ends it quietly, once the run's
                # state says what happened.
                raise end_cancelled() from exc
            # Another SIGTERM (the worker shutting down): Prefect's engine decides, as it
            # would have had our handler not stood in for its own while collecting.
            get_run_logger().info("%s", exc)
            raise TerminationSignal(signal.SIGTERM) from exc
        if exc.cause == "cancelled":
            return Cancelled(message=str(exc))
        raise
    finally:
        stopping.clear()


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A run collected (or merged) and analysed: its store, its report (and the report's link,
    when a report server serves it) and its analysis; then what collecting did: the batches run
    here, or the shards run and their merge (the `aggregate` flow has only the merge)."""

    run_dir: str
    report: str
    report_url: str | None
    analysis: RunAnalysis
    batches: tuple[BatchOutcome, ...] = ()
    shards: tuple[ShardOutcome, ...] = ()
    aggregate: MergeReport | None = None
    #: the collection the shards belong to (`rollouts/collection.py`); none when unsharded
    collection: str | None = None


class UnhealthyRun(GateFailed):
    """The run finished and failed its health gate: its flow run ends Failed, as `gym eval run`
    exits 2 on it. Carries the run's outcome, for the CLI to print."""

    def __init__(self, message: str, result: RunOutcome) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (str(self), self.result)


def health_gated(outcome: RunOutcome) -> RunOutcome | State:
    """The flow run's end as the health gate says: its outcome, or, for a run that fails the
    gate, a Failed state named Unhealthy whose message gives the failing checks."""
    health = outcome.analysis.health
    if health.gate != "fail":
        return outcome
    message = (
        f"health gate failed ({', '.join(health.gate_failures)}): see the report, or "
        f"`gym eval health {outcome.run_dir}`"
    )
    return Failed(name="Unhealthy", message=message, data=UnhealthyRun(message, outcome))


def analyse_run(run_dir: str) -> RunOutcome:
    """Health, profile, diagnosis and decision of a run store, computed once; the report, the
    artifacts and the log render that one analysis."""
    analysis = analyse_store(run_dir)
    report_path = render_report(run_dir, quote(analysis))
    link = publish_results(analysis, report_path)
    run_log.results(analysis, link)
    return RunOutcome(run_dir, report_path, link.url, analysis)


def _collect_here(plan: RunPlan, resume: bool, retry_failed: bool) -> tuple[BatchOutcome, ...]:
    progress.started(len(plan.keys()))
    with RunProgress(len(plan.keys())):
        return collect_plan(
            plan, resume=resume, retry_failed=retry_failed, on_batch=run_log.batch_done
        )


def _collect_shards(
    plan: RunPlan, scale: ScaleOptions, resume: bool, retry_failed: bool
) -> tuple[tuple[ShardOutcome, ...], MergeReport | None]:
    """Every shard run (here or on a work pool) and merged into the run store."""
    config = plan.config
    check_destination(
        config.out, plan.run_id, resume=resume, benchmark_version=plan.benchmark_version
    )
    configs = [shard_config(config, scale, plan.run_id, i) for i in range(scale.shards)]
    if resume and retry_failed:
        supersede_failed_in_shards(config.out, [c.out for c in configs])
    progress.started(len(plan.keys()))
    local = scale.work_pool is None
    options = {
        "retries": scale.shard_retries,
        "retry_delay_seconds": scale.shard_retry_delay_s,
        "retry_condition_fn": retry_unless_stopped,
    }
    finished: dict[int, ShardOutcome] = {}
    failures: dict[int, str] = {}
    # Local shards share one local policy server; pool shards each start their own if needed.
    with (
        RunProgress(len(plan.keys()), shards=scale.shards) as tracker,
        model_endpoint(plan) if local else nullcontext(None) as base_url,
    ):
        shard_flow = shard_options(plan, scale)
        if local:
            runner = run_shard_here.with_options(**options)
            futures = [runner.submit(quote(plan), c, base_url, shard_flow) for c in configs]
        else:
            for warning in loopback_urls(config):  # preflight: said before any shard starts
                progress.say(f"warning: {warning}")
            deployment_id = shard_deployment(scale.work_pool)
            runner = run_shard_on_pool.with_options(**options)
            futures = [
                runner.submit(quote(plan), c, deployment_id, scale.shard_timeout_s, shard_flow)
                for c in configs
            ]
        index = {future.task_run_id: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            shard = index[future.task_run_id]
            try:
                finished[shard] = future.result()
                run_log.shard_done(shard, scale.shards, finished[shard])
            except Exception as exc:  # a shard's failure is reported after the others finish
                failures[shard] = f"{type(exc).__name__}: {exc}"
                run_log.shard_failed(shard, scale.shards, failures[shard])
            tracker.shard_finished(len(finished), len(failures))
    # A failed shard's store may be partial or unreadable: it is merged once it completes. A
    # stopped shard's store holds whole rollouts only: merged, the run store shows what finished.
    stopped = stopping.stop_requested() is not None
    merging = configs if stopped else [configs[i] for i in sorted(finished)]
    # the run's plan as the merge needs it: with the shards' count (any shard's config has it)
    sharded = plan.for_shard(configs[0])
    merged = aggregate_shards(
        config.out, [c.out for c in merging], quote(sharded), checkpoints=stopped
    )
    stopping.raise_if_requested()
    if failures:
        publish_shard_failure(failures, merged.stored if merged else 0, len(plan.keys()))
        listed = "; ".join(f"shard {i}: {m}" for i, m in sorted(failures.items()))
        raise ShardFailed(
            f"{len(failures)} of {scale.shards} shards failed ({listed}); retry this flow run "
            "to re-run only them"
        )
    return tuple(finished[i] for i in sorted(finished)), merged
