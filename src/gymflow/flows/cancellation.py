"""A Prefect cancellation of a flow run that no worker supervises (`gym eval run` on a
terminal, against a Prefect server): nothing would deliver it, so a thread watches the run's
state and turns `Cancelling` into a stop request, which the collector honours as it does a
signal. A worker-run deployment gets its worker's SIGTERM too; whichever comes first stops it."""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.exceptions import Abort
from prefect.runtime import flow_run
from prefect.states import Cancelled

from gymflow.core.errors import option
from gymflow.rollouts import stopping

#: Seconds between two reads of the flow run's state: one small request each.
POLL_S = 2.0


def _cancel_requested(flow_run_id: UUID) -> bool:
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run_id).state
    return state is not None and (state.is_cancelling() or state.is_cancelled())


def cancelling() -> bool:
    """Whether this flow run is being cancelled (Cancel in the UI sets it Cancelling)."""
    return flow_run.id is not None and _cancel_requested(UUID(str(flow_run.id)))


def cancelled_message(flow_run_id: UUID | str) -> str:
    return (
        f"flow run {flow_run_id} was cancelled in Prefect: finished rollouts are committed; "
        f"continue it ({option('resume')})"
    )


def end_cancelled() -> Abort:
    """Mark this flow run Cancelled, saying what is kept and how to continue, and return the
    Abort that ends its process quietly: Prefect's engine takes the state an Abort carries as
    the run's last (its log's "Finished in state Cancelled(...)")."""
    message = cancelled_message(flow_run.id)
    get_run_logger().info("%s", message)
    with get_client(sync_client=True) as client:
        set_to = client.set_flow_run_state(
            UUID(str(flow_run.id)), Cancelled(message=message), force=True
        )
    abort = Abort(message)
    abort.state = set_to.state
    return abort


def _watch(flow_run_id: UUID, done: threading.Event) -> None:
    while not done.wait(POLL_S):
        try:
            cancelled = _cancel_requested(flow_run_id)
        except Exception:  # an API hiccup: the next poll asks again
            continue
        if cancelled:
            stopping.request_stop(cancelled_message(flow_run_id), cause="cancelled")
            return


def supervised() -> bool:
    """This process was started by a Prefect worker or runner to execute a flow run (it names
    the run in PREFECT__FLOW_RUN_ID): the worker delivers a cancellation as SIGTERM, after
    telling Prefect's engine it is one, and the engine then ends the run Cancelled cleanly."""
    return bool(os.environ.get("PREFECT__FLOW_RUN_ID"))


def own_process() -> bool:
    """This process was started to run this very flow run (a worker's, for a deployment run,
    a work-pool shard's too), not a subflow of another run in it."""
    return flow_run.id is not None and os.environ.get("PREFECT__FLOW_RUN_ID") == str(flow_run.id)


@contextlib.contextmanager
def stop_on_cancel() -> Iterator[None]:
    """While inside: a cancellation of this flow run asks the collectors to stop. Under a worker
    its SIGTERM does (`supervised`): a stop seen here first would end the run before the engine
    knew it was a cancellation, and it would log the Cancelled end as an unexpected error."""
    run_id = flow_run.id
    if run_id is None or supervised():
        yield
        return
    done = threading.Event()
    # in this context, so that its stop request names options as this flow run does
    thread = threading.Thread(
        target=contextvars.copy_context().run,
        args=(_watch, UUID(str(run_id)), done),
        name="gymflow-cancel",
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        done.set()
