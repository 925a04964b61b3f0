"""Progress reporting from the collector to whoever is watching (the CLI's progress bar)."""

from __future__ import annotations

from typing import Protocol


class ProgressListener(Protocol):
    def started(self, total: int) -> None: ...
    def advanced(self, count: int) -> None: ...


_listener: ProgressListener | None = None


def set_listener(listener: ProgressListener | None) -> None:
    global _listener
    _listener = listener


def started(total: int) -> None:
    if _listener is not None:
        _listener.started(total)


def advanced(count: int) -> None:
    if _listener is not None:
        _listener.advanced(count)
