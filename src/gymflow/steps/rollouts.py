"""Prefect tasks for collection: one task per batch of rollouts, never one per rollout."""

from __future__ import annotations

from dataclasses import asdict

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run

from gymflow.core import progress
from gymflow.rollouts.collect import Collector
from gymflow.rollouts.outcomes import BatchOutcome
from gymflow.rollouts.plan import RolloutKey
from gymflow.rollouts.stopping import RunStopped
from gymflow.store.db import StoreError, StoreFailure
from gymflow.store.runs import missing_keys


def retry_unless_stopped(task, task_run, state) -> bool:
    """A stopped run was asked to stop (or found its model server gone): no retry."""
    try:
        state.result()
    except RunStopped:
        return False
    except Exception:
        return True
    return True


def _worth_retrying(task, task_run, state) -> bool:
    """A full disk or a refused store does not fix itself within a retry delay; a stopped run
    was asked to stop."""
    try:
        state.result()
    except (StoreError, StoreFailure, RunStopped):
        return False
    except Exception:
        return True
    return True


# The store, not Prefect's cache, decides what is done: a retried or re-run batch queries it and
# runs only the missing rollouts, so a deleted or partial store can never be mistaken for done.
# The collector (event loop, HTTP session, store connection) outlives the batch: the flow opens it
# once per run and hands it to every batch task, quoted (Prefect neither walks nor records it).
@task(
    name="collect-batch",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=_worth_retrying,
)
def collect_batch(keys: list[RolloutKey], collector: Collector) -> BatchOutcome:
    # a cursor of its own: the batch before this one may be committing through the connection
    with collector.con.cursor() as cursor:
        todo = missing_keys(cursor, collector.plan.run_id, keys)
    if (task_run.run_count or 1) == 1:
        # on a retry, what the failed attempt stored was already counted as it flushed
        progress.advanced(len(keys) - len(todo))
    try:
        stats = collector.run(todo)
    except RunStopped as stop:
        if stop.cause == "dead_server":
            raise
        # Asked to stop from outside (a signal, a cancellation): what finished is committed,
        # and that is not this batch failing: a failed task would log an error for a clean
        # stop. The flow ends the run at once (`gymflow.flows.eval_shard.collect_plan`), so
        # these counts are never reported.
        return BatchOutcome(skipped=len(keys) - len(todo), attempted=0, completed=0, failed=0)
    return BatchOutcome(skipped=len(keys) - len(todo), **asdict(stats))
