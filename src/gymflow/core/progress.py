"""Progress reporting from the collector to whoever is watching: the CLI's progress bar, and a
flow run's progress artifact and log (`gymflow.flows.progress`). A `gym eval run` has both.

Notices go the same way (`say`): a print inside a flow run is Prefect's (`log_prints`), logged at
INFO, which gymflow's Prefect log level drops, so a notice printed there reached no one."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator
from typing import Protocol

#: The attribute a notice's log record carries (a flow run's log): `gym` shows the notice its
#: own way, not as a Prefect log line too.
NOTICE = "gymflow_notice"


class ProgressListener(Protocol):
    def started(self, total: int) -> None: ...
    def advanced(self, count: int) -> None: ...
    def said(self, text: str) -> None: ...


_listeners: list[ProgressListener] = []


@contextlib.contextmanager
def listening(listener: ProgressListener) -> Generator[None, None, None]:
    """While inside, `listener` hears of every run started, every rollout stored and every
    notice."""
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


def say(text: str) -> None:
    """A notice for whoever watches the run (a server slow to answer, what is installed): each
    listener shows it; with none (gymflow used as a library), stderr."""
    if not _listeners:
        sys.stderr.write(f"gymflow: {text}\n")
        sys.stderr.flush()
    for listener in list(_listeners):
        listener.said(text)
