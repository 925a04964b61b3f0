"""A Prefect cancellation of a flow run that no worker supervises (`gym eval run` on a
terminal, against a Prefect server): nothing would deliver it, so a thread watches the run's
state and turns `Cancelling` into a stop request, which the collector honours as it does a
signal. A worker-run deployment gets its worker's SIGTERM too; whichever comes first stops it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.runtime import flow_run

from gymflow.rollouts import stopping

#: Seconds between two reads of the flow run's state: one small request each.
POLL_S = 2.0


def _cancel_requested(flow_run_id: UUID) -> bool:
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run_id).state
    return state is not None and (state.is_cancelling() or state.is_cancelled())


def _watch(flow_run_id: UUID, done: threading.Event) -> None:
    while not done.wait(POLL_S):
        try:
            cancelled = _cancel_requested(flow_run_id)
        except Exception:  # an API hiccup: the next poll asks again
            continue
        if cancelled:
            stopping.request_stop(
                f"flow run {flow_run_id} was cancelled in Prefect: finished rollouts are "
                "committed; continue with --resume (or Retry in the UI)",
                cause="cancelled",
            )
            return


@contextlib.contextmanager
def stop_on_cancel() -> Iterator[None]:
    """While inside: a cancellation of this flow run asks the collectors to stop."""
    run_id = flow_run.id
    if run_id is None:
        yield
        return
    done = threading.Event()
    thread = threading.Thread(
        target=_watch, args=(UUID(str(run_id)), done), name="gymflow-cancel", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        done.set()
