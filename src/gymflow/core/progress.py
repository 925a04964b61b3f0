"""Progress reporting from the collector to whoever is watching: the CLI's progress bar, and a
flow run's progress artifact and log (`gymflow.flows.progress`). A `gym eval run` has both."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Protocol


class ProgressListener(Protocol):
    def started(self, total: int) -> None: ...
    def advanced(self, count: int) -> None: ...


_listeners: list[ProgressListener] = []


@contextlib.contextmanager
def listening(listener: ProgressListener) -> Generator[None, None, None]:
    """While inside, `listener` hears of every run started and every rollout stored."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def started(total: int) -> None:
    for listener in list(_listeners):
        listener.started(total)


def advanced(count: int) -> None:
    for listener in list(_listeners):
        listener.advanced(count)
