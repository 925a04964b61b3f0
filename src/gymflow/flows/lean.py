"""Prefect's `flow` with less fixed cost per run: parameters recorded without importing FastAPI,
and no heartbeat thread to wait for when a run started from a terminal ends.

Prefect serializes a flow run's parameters with FastAPI's `jsonable_encoder`, which imports all
of FastAPI (0.3 s on a quiet 2-core machine, 0.7 s under load) in a process that otherwise never
needs it: a tenth of a small run's wall time. pydantic's own conversion gives the same JSON for
the parameters gymflow's flows take (pydantic models, dataclasses, plain values).

A parameter that does not validate is not stored: the flow run records a placeholder in its
place. A run started past the form's schema (from Python, a deployment that does not enforce it)
is refused when its parameters are validated, but Prefect had already stored them with the run,
in plain text, a key in a URL or given as `api_key_env` included. Every flow gymflow deploys is one
(`gymflow.flows.lean.flow`); tests/faults runs each deployment in prefect.yaml to check.

A flow run's heartbeat thread sleeps in 1 s steps, and the run waits for it to wake when it ends:
0.5 s on average (`without_heartbeat`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import typing
from collections.abc import Callable, Iterator
from typing import Any

from prefect.flows import Flow
from prefect.futures import PrefectFuture
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import State
from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python


def _placeholder(value: Any) -> str:
    # what Prefect stores for a value it cannot encode (and for futures and states)
    return f"<{type(value).__name__}>"


#: What a flow run records for a parameter that does not validate.
REFUSED = "<refused: not stored; the flow run's error says why>"


class LeanFlow(Flow):
    @functools.cached_property
    def _adapters(self) -> dict[str, TypeAdapter]:
        hints = typing.get_type_hints(self.fn)
        names = inspect.signature(self.fn).parameters
        return {name: TypeAdapter(hints[name]) for name in names if name in hints}

    def _valid(self, key: str, value: Any) -> bool:
        adapter = self._adapters.get(key)
        if adapter is None:
            return True
        try:
            adapter.validate_python(value)
        except ValidationError:
            return False
        return True

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        serialized = {}
        for key, value in parameters.items():
            if not self._valid(key, value):
                serialized[key] = REFUSED
                continue
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
