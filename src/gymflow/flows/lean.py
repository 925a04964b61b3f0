"""Prefect's `flow` with less fixed cost per run: parameters recorded without importing FastAPI,
and no heartbeat thread to wait for when a run started from a terminal ends.

Prefect serializes a flow run's parameters with FastAPI's `jsonable_encoder`, which imports all
of FastAPI (0.3 s on a quiet 2-core machine, 0.7 s under load) in a process that otherwise never
needs it: a tenth of a small run's wall time. pydantic's own conversion gives the same JSON for
the parameters gymflow's flows take (pydantic models, dataclasses, plain values).

A flow run's heartbeat thread sleeps in 1 s steps, and the run waits for it to wake when it ends:
0.5 s on average (`without_heartbeat`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from prefect.flows import Flow
from prefect.futures import PrefectFuture
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import State
from pydantic_core import to_jsonable_python


def _placeholder(value: Any) -> str:
    # what Prefect stores for a value it cannot encode (and for futures and states)
    return f"<{type(value).__name__}>"


class LeanFlow(Flow):
    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        serialized = {}
        for key, value in parameters.items():
            if isinstance(value, PrefectFuture | State):
                serialized[key] = _placeholder(value)
                continue
            try:
                serialized[key] = to_jsonable_python(value, fallback=_placeholder)
            except Exception:  # as Prefect does: a parameter it cannot encode is not stored
                serialized[key] = _placeholder(value)
        return serialized


def flow(**options: Any) -> Callable[[Callable[..., Any]], LeanFlow]:
    """`prefect.flow(**options)` for a function, as a `LeanFlow`."""
    return lambda fn: LeanFlow(fn=fn, **options)


@contextlib.contextmanager
def without_heartbeat() -> Iterator[None]:
    """Flow runs started inside (from a terminal: `gym eval run`) send no heartbeats, unless
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY is set: heartbeats only mark a run crashed for a server
    automation set up to watch them, and runs on a worker have their worker for that."""
    if os.environ.get("PREFECT_FLOWS_HEARTBEAT_FREQUENCY"):
        yield
        return
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
