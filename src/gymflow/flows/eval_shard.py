"""One shard of a run as a flow (the `eval-shard` deployment): collect its missing rollouts."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing, nullcontext

from prefect.runtime import flow_run
from prefect.states import Cancelled, State
from prefect.utilities.annotations import quote

from gymflow.core.config import EvalConfig
from gymflow.flows import run_log
from gymflow.flows.cancellation import own_process
from gymflow.flows.labels import eval_shard_name
from gymflow.flows.lean import flow
from gymflow.flows.parameters import CHECKPOINT_ROLLOUTS, CHECKPOINT_S
from gymflow.flows.progress import RunProgress
from gymflow.rollouts import stopping
from gymflow.rollouts.collect import Collector
from gymflow.rollouts.outcomes import BatchOutcome
from gymflow.rollouts.plan import RunPlan, plan_of
from gymflow.rollouts.published import check_expectations, run_published
from gymflow.rollouts.registration import prepare_run
from gymflow.rollouts.travel import travelled
from gymflow.simulated.endpoint import model_endpoint
from gymflow.steps.rollouts import collect_batch
from gymflow.store.db import connect, held
from gymflow.store.remote import is_url


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def collect_plan(
    plan: RunPlan,
    *,
    resume: bool,
    retry_failed: bool = False,
    base_url: str | None = None,
    on_batch: Callable[[int, int, BatchOutcome], None] | None = None,
) -> tuple[BatchOutcome, ...]:
    """Register the run in its store (`prepare_run`), then run the plan's rollout keys as
    Prefect tasks of `batch_size` rollouts each, against `base_url` or, if unset, the endpoint
    the config names (a local policy server started here). `on_batch(done, total, stats)` hears
    of each finished batch. The store is opened once, for writing, and held from the
    registration to the last batch (`store.db.held`): a reader cannot slip in between two. One
    collector serves every batch (`Collector`): no event loop, HTTP session or store connection
    restarts between them.

    The plan, the keys and the collector are quoted: Prefect would otherwise walk every task
    and key of them looking for futures, about 0.15 s per batch task for 2,000 keys on these
    machines."""
    batches = _chunks(plan.keys(), plan.config.batch_size)
    collected: list[BatchOutcome] = []
    with held(plan.run_dir):
        prepare_run(plan, resume, retry_failed)
        with (
            model_endpoint(plan) if base_url is None else nullcontext(base_url) as url,
            closing(connect(plan.run_dir)) as con,
            Collector(plan, con, base_url=url) as collector,
        ):
            # Each batch task is started while the one before it runs: the collector hands it
            # the window's slots as the earlier batch's tail frees them (`Collector`), so the
            # window does not drain between batches. Outcomes are taken in order.
            def finished(future) -> None:
                collected.append(future.result())
                stopping.raise_if_requested()  # a batch asked to stop returns what it committed
                if on_batch is not None:
                    on_batch(len(collected), len(batches), collected[-1])

            running = []
            try:
                for index, batch in enumerate(batches):
                    running.append(collect_batch.submit(quote(batch), quote(collector)))
                    if index > 0:
                        finished(running.pop(0))
                if running:
                    finished(running.pop(0))
            finally:
                for future in running:  # the collector closes once no batch runs on it
                    future.wait()
    return tuple(collected)


@flow(name="eval-shard", flow_run_name=eval_shard_name, log_prints=True)
def eval_shard(
    config: EvalConfig,
    base_url: str | None = None,
    expected: dict[str, str] | None = None,
    checkpoint_s: float = CHECKPOINT_S,
    checkpoint_rollouts: int = CHECKPOINT_ROLLOUTS,
    bundle: str | None = None,
) -> tuple[BatchOutcome, ...] | State:
    """Collect the missing rollouts of one shard (`config.shard`) into its store (`config.out`);
    what each batch did.

    Always resumes: a shard store belongs to one run, and re-running a shard (a retry, a UI
    retry of the parent run) must run only what the store does not hold yet. A `config.out`
    that is a URL is a published shard (`rollouts/published.py`): run on a local store here,
    checkpointed there, and committed once.

    Args:
        config: The run's config with `shard` (which shard) and `out` (the shard's store).
        base_url: A model endpoint somebody else started (…/v1); unset, the config's model.
        expected: What the parent run resolved (benchmark and DuckDB version): a shard that
            differs is refused before any model call.
        checkpoint_s: Published shards: seconds between checkpoints.
        checkpoint_rollouts: Published shards: a checkpoint once this many rollouts are new.
        bundle: The run's own benchmark, dataset and environment files, at the shard root
            (`rollouts/travel.py`): read ahead of this machine's.
    """

    def collect(plan: RunPlan) -> tuple[BatchOutcome, ...]:
        # A shard in a process of its own (a work pool's) publishes its progress, which the
        # run that started it reads (`stored_by`); a subflow's reaches its parent in-process.
        with RunProgress(len(plan.keys())) if own_process() else nullcontext():
            return collect_plan(plan, resume=True, base_url=base_url, on_batch=run_log.batch_done)

    try:
        with travelled(bundle):  # before the plan: a worker may know the benchmark only from it
            plan = plan_of(config)
            check_expectations(plan, expected)
            if not is_url(config.out):
                return collect(plan)
            return run_published(
                plan,
                collect,
                every_s=checkpoint_s,
                every_rollouts=checkpoint_rollouts,
                meta={"bundle": bundle},
            )
    except stopping.RunStopped as exc:
        if exc.cause == "dead_server" or own_process() or not flow_run.parent_flow_run_id:
            raise
        # The run this shard is a subflow of was cancelled or signalled: the shard stops with it
        # and ends Cancelled as the parent does, not Failed with a traceback (ERROR lines for a
        # clean stop); the parent's end says how to continue.
        return Cancelled(message=str(exc))
