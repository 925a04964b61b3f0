"""Running one shard of a run: here, as a subflow, or on a work pool, as an `eval-shard`
deployment run. Both first ask the shard's store what is done, so a retried parent run (the
Prefect UI's Retry) re-runs only the shards that are not complete."""

from __future__ import annotations

import time
from collections.abc import Callable
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterIdempotencyKey,
    FlowRunFilterName,
    FlowRunFilterParentFlowRunId,
    WorkPoolFilter,
    WorkPoolFilterName,
)
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.responses import SetStateStatus
from prefect.deployments import run_deployment
from prefect.flow_engine import run_flow
from prefect.runtime import flow_run as parent_run
from prefect.states import AwaitingRetry, Cancelling, Crashed, Pending, State

from gymflow.core import progress
from gymflow.core.config import ConfigError, EvalConfig
from gymflow.core.errors import RuntimeFailure
from gymflow.flows.eval_shard import eval_shard
from gymflow.flows.labels import eval_shard_name_of, shard_run_name
from gymflow.flows.parameters import SHARD_FLOW, ScaleOptions
from gymflow.flows.progress import stored_by
from gymflow.rollouts.outcomes import ShardOutcome
from gymflow.rollouts.plan import RunPlan, handed_down
from gymflow.rollouts.published import expectations, publish_run, run_url
from gymflow.rollouts.travel import publish_bundle
from gymflow.steps.shards import progress_of
from gymflow.store.remote import is_url


class ShardFailed(RuntimeFailure):
    """A shard's run ended without storing all of its rollouts (the CLI prints it plainly)."""


def _label(config: EvalConfig) -> str:
    return f"shard {config.shard.index}/{config.shard.count}"


RETRIED = "gymflow: the parent run retries this shard"


def _run_again(client, run, state, config: EvalConfig) -> None:
    """Put a shard's earlier flow run in `state` so that it runs again, in place."""
    retried = client.set_flow_run_state(run.id, state)
    if retried.status != SetStateStatus.ACCEPT:
        raise ShardFailed(
            f"{_label(config)}: flow run {run.name} ended {run.state.name} and Prefect refused "
            f"to run it again ({retried.details})"
        )


@task(name="run-shard", cache_policy=NO_CACHE, task_run_name="run-shard-{config.shard.index}")
def run_shard_here(
    plan: RunPlan, config: EvalConfig, base_url: str | None, options: dict[str, Any]
) -> ShardOutcome:
    """Run one shard as a subflow of this flow run, in this process (`options`: the shard
    flow's other parameters, `shard_options`)."""
    before = progress_of(plan, config)
    if before.complete:
        progress.advanced(before.stored)
        return ShardOutcome(before, ran=False)
    with handed_down(plan.for_shard(config)):
        state = _subflow_or_rerun(config, {"config": config, "base_url": base_url, **options})
    after = progress_of(plan, config)
    if state.is_cancelled():  # stopped with its run, which ends Cancelled once every shard is back
        return ShardOutcome(after, ran=True)
    batches = state.result()  # a failed shard's error
    if not after.complete:
        raise ShardFailed(
            f"{_label(config)}: its store {after.store} holds {after.stored} of {after.expected} "
            f"rollouts after the shard ran{f' ({after.error})' if after.error else ''}"
        )
    return ShardOutcome(after, ran=True, batches=batches)


def _subflow_or_rerun(config: EvalConfig, parameters: dict[str, Any]) -> State:
    """The final state of the shard's subflow, run as pool shards are (`_run_or_rerun`): the
    first time, a new subflow run; once this parent run holds one of the shard that did not
    complete (the parent's Retry in the UI, or this task's retry), that same flow run again, so
    the shard that failed and then succeeded ends green. Prefect itself would start a new
    subflow run beside the red one (`FlowRunEngine.load_subflow_run`); its engine runs a given
    flow run when handed one."""
    name = eval_shard_name_of(config)
    with get_client(sync_client=True) as client:
        earlier = [
            run
            for run in client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_run.id]),
                    name=FlowRunFilterName(any_=[name]),
                )
            )
            if run.state is not None and run.state.is_final() and not run.state.is_completed()
        ]
        if not earlier:
            return eval_shard(**parameters, return_state=True)
        [run, *_] = earlier
        # Pending, not AwaitingRetry: Prefect reschedules only deployment runs
        _run_again(client, run, Pending(message=RETRIED), config)
        # what this attempt runs with (a new local policy server's base_url), as the UI shows it
        client.update_flow_run(run.id, parameters=eval_shard.serialize_parameters(parameters))
        run = client.read_flow_run(run.id)
    return run_flow(eval_shard, flow_run=run, parameters=parameters, return_type="state")


def loopback_urls(config: EvalConfig) -> list[str]:
    """Why a run's shards may not reach its servers from a worker on another machine: each
    URL of the config on a loopback address (127.0.0.0/8, ::1, localhost) names the worker's
    own host there, not the one it was written on."""
    found = []
    for field, url in (
        ("model.base_url", config.model.base_url),
        ("resources_url", config.resources_url),
    ):
        host = urlsplit(str(url)).hostname if url else None
        if host is None:
            continue
        try:
            loopback = host == "localhost" or ip_address(host).is_loopback
        except ValueError:  # a host name: resolved on the worker
            loopback = host.endswith(".localhost")
        if loopback:
            found.append(
                f"{field} {url} is a loopback address: a shard on a worker on another machine "
                "reaches that machine's own port, not this one's; give an address every worker "
                "reaches (fine when every worker runs on this machine)"
            )
    return found


def publish_beside_shards(config: EvalConfig, shard_root: str, collection: str | None) -> list[str]:
    """Upload the run store and report beside the shards of the run's collection: the flow
    may have run on a worker, whose disk the user does not see."""
    published = publish_run(config.out, run_url(shard_root, config.fingerprint(), collection))
    print(f"run store and report published: {', '.join(published)}")
    return published


def shard_options(plan: RunPlan, scale: ScaleOptions) -> dict[str, Any]:
    """The shard flow's parameters besides its config: what the run resolved, for the shard to
    check, and how often a published shard checkpoints."""
    published = scale.shard_root is not None and is_url(scale.shard_root)
    return {
        "expected": expectations(plan),
        "checkpoint_s": scale.checkpoint_s,
        "checkpoint_rollouts": scale.checkpoint_rollouts,
        "bundle": publish_bundle(plan, scale.shard_root) if published else None,
    }


def shard_deployment(work_pool: str) -> UUID:
    """The `eval-shard` deployment that runs on `work_pool`."""
    with get_client(sync_client=True) as client:
        found = client.read_deployments(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[SHARD_FLOW])),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[work_pool])),
        )
    if not found:
        raise ConfigError(
            f"work pool {work_pool!r} has no deployment of the {SHARD_FLOW!r} flow; deploy it "
            f"with `prefect deploy -n {SHARD_FLOW} --pool {work_pool}` from the gymflow checkout"
        )
    named = [d for d in found if d.name == SHARD_FLOW]
    return (named or found)[0].id


#: Seconds between two reads of a shard's flow run while waiting for it.
POLL_S = 2


def _run_or_rerun(
    plan: RunPlan,
    config: EvalConfig,
    deployment_id: UUID,
    timeout_s: float | None,
    options: dict[str, Any],
    on_stored: Callable[[int], None],
) -> FlowRun:
    """The shard's flow run of this parent run, once final (or when `timeout_s` ran out);
    `on_stored(n)` hears, every few seconds while it runs, how many rollouts its store holds
    (its progress artifact: its store is held by its writer, on its worker). Each shard has one
    flow run per parent run (its idempotency key): a retry (the task's, or the parent's Retry
    in the UI) runs that one again, as the UI's Retry would, so a shard that failed and then
    succeeded ends green instead of staying red beside a new run."""
    name = shard_run_name(plan.run_id, config)
    key = f"{parent_run.id}/{name}"
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        [earlier] = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(idempotency_key=FlowRunFilterIdempotencyKey(any_=[key])),
            limit=1,
        ) or [None]
        if earlier is not None and (earlier.state is None or not earlier.state.is_final()):
            # An attempt this run gave up on (it outlived timeout_s and was told to cancel): its
            # host died or was cut off, so it may never end. Run again as a new flow run, which
            # any worker may take; the old one reads Crashed, not Running or Cancelling forever.
            client.set_flow_run_state(
                earlier.id,
                Crashed(message="gymflow: its host stopped answering; the shard ran again"),
                force=True,
            )
            key, earlier = f"{key}/after-{earlier.id}", None
        if earlier is None:
            earlier = run_deployment(  # created, not waited for: the loop below waits
                deployment_id,
                parameters={"config": config.model_dump(mode="json"), **options},
                flow_run_name=name,
                idempotency_key=key,
                timeout=0,
            )
            runs_before = 0
        else:
            _run_again(client, earlier, AwaitingRetry(message=RETRIED), config)
            runs_before = earlier.run_count
        while True:
            run = client.read_flow_run(earlier.id)
            if run.state is not None and run.state.is_final() and run.run_count > runs_before:
                return run
            if deadline is not None and time.monotonic() > deadline:
                return run
            if (stored := stored_by(client, run.id)) is not None:
                on_stored(stored)
            time.sleep(POLL_S)


@task(
    name="run-shard-on-pool",
    cache_policy=NO_CACHE,
    task_run_name="run-shard-{config.shard.index}-on-pool",
)
def run_shard_on_pool(
    plan: RunPlan,
    config: EvalConfig,
    deployment_id: UUID,
    timeout_s: float | None,
    options: dict[str, Any],
) -> ShardOutcome:
    """Run one shard as a run of the `eval-shard` deployment and wait for it."""
    before = progress_of(plan, config)
    if before.complete:
        progress.advanced(before.stored)
        return ShardOutcome(before, ran=False)
    reported = 0

    def on_stored(stored: int) -> None:  # the run's progress moves within the shard
        nonlocal reported
        if stored > reported:
            progress.advanced(stored - reported)
            reported = stored

    try:
        flow_run = _run_or_rerun(plan, config, deployment_id, timeout_s, options, on_stored)
        outcome = _ended(plan, config, flow_run, timeout_s)
    except Exception:
        progress.advanced(-reported)  # a failed shard does not count
        raise
    progress.advanced(outcome.progress.stored - reported)
    return outcome


def _ended(
    plan: RunPlan, config: EvalConfig, flow_run: FlowRun, timeout_s: float | None
) -> ShardOutcome:
    """What the shard's flow run left, once it ended (or `timeout_s` ran out)."""
    state = flow_run.state
    if state is None or not state.is_final():
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(
                flow_run.id, Cancelling(message="gymflow: shard timed out"), force=True
            )
        raise ShardFailed(
            f"{_label(config)}: flow run {flow_run.name} timed out after {timeout_s}s"
        )
    if not state.is_completed():
        raise ShardFailed(
            f"{_label(config)}: flow run {flow_run.name} ended {state.name}: {state.message}"
        )
    after = progress_of(plan, config)
    if not after.complete and is_url(config.out):
        raise ShardFailed(
            f"{_label(config)}: flow run {flow_run.name} completed without committing a result "
            f"at {config.out} (what it stored is checkpointed there; its log says why)"
        )
    if not after.complete:
        raise ShardFailed(
            f"{_label(config)}: flow run {flow_run.name} completed, but the store this flow reads "
            f"({after.store}) holds {after.stored} of {after.expected} rollouts: is shard_root "
            "a path the workers and this flow share? (or a URL every worker reaches)"
        )
    return ShardOutcome(after, ran=True, flow_run=str(flow_run.id))
