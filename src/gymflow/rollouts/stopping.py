"""Stopping a collection early: on request (a signal, a Prefect cancellation) or because the
model server is gone. Either way the collector commits what finished, drops what is in flight
(not recorded as failures: `--resume` runs them), and raises `RunStopped`.

The request is process-wide: a signal reaches the main thread, while local shards collect on
worker threads, each on its own event loop; every collector polls the one flag."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from gymflow.core.errors import GymflowError, RuntimeFailure, option
from gymflow.core.protocols import ResourcesUnavailable

#: What systemd, Kubernetes, `docker stop` and a Prefect worker's cancel send, and Ctrl-C.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: The failure kind that says the model server could not be reached (refused, reset, DNS):
#: rollout after rollout, after the client's own retries, it means the server is gone.
DEAD_SERVER_KIND = "transport_error"
#: The same of a served resources server (`resources_url`): unreachable or answering 5xx, it
#: fails every rollout, each after its connect timeout when the host is gone.
DEAD_RESOURCES_KIND = ResourcesUnavailable.kind


class RunStopped(GymflowError):
    """Collection stopped before its end; what finished is committed, `--resume` continues.

    `cause` is `signal` (SIGINT, SIGTERM), `cancelled` (a Prefect cancellation) or
    `dead_server` (consecutive transport failures)."""

    def __init__(self, message: str, *, cause: str, signal_number: int | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.signal_number = signal_number

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        """A dead server is a runtime failure (3); a stop, shell style: 128 + the signal (SIGTERM
        for a cancellation): `gymflow.cli.exit_codes`' INTERRUPTED and TERMINATED."""
        if self.cause == "dead_server":
            return RuntimeFailure.exit_code
        return 128 + (self.signal_number or signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class StopRequest:
    message: str
    cause: str
    signal_number: int | None = None

    def error(self) -> RunStopped:
        return RunStopped(self.message, cause=self.cause, signal_number=self.signal_number)


_lock = threading.Lock()
_request: StopRequest | None = None


def request_stop(message: str, *, cause: str, signal_number: int | None = None) -> None:
    """Ask every collector in this process to stop; the first request's reason is kept."""
    global _request
    with _lock:
        if _request is None:
            _request = StopRequest(message, cause, signal_number)


def stop_requested() -> StopRequest | None:
    return _request


def clear() -> None:
    """Forget a request (a new run in the same process starts clean)."""
    global _request
    with _lock:
        _request = None


class DeadServerWatch:
    """One collector's count of rollouts that failed in a row because the server could not be
    reached; any other outcome resets it. At `limit` the watch trips: the collector stops (its
    own decision: other collectors of the process see the same server and trip on their own)."""

    def __init__(self, limit: int, base_url: str) -> None:
        self.limit = limit
        self.base_url = base_url
        self.streak = 0
        self.tripped: StopRequest | None = None

    def saw(self, failure_kind: str | None, error: str | None) -> None:
        if failure_kind not in (DEAD_SERVER_KIND, DEAD_RESOURCES_KIND):
            self.streak = 0
            return
        self.streak += 1
        if self.streak >= self.limit and self.tripped is None:
            first_line = (error or "").strip().splitlines()[0][:200] if error else "no message"
            server = (
                f"model server {self.base_url}"
                if failure_kind == DEAD_SERVER_KIND
                else "resources server"  # its URL leads the error's first line
            )
            self.tripped = StopRequest(
                f"{server} is unreachable: {self.streak} rollouts in a row "
                f"failed with {failure_kind} ({first_line}); stopped early. Start the server, "
                f"then continue it ({option('resume')})",
                cause="dead_server",
            )


def raise_if_requested() -> None:
    """Between stages: a stop asked for while a stage ran ends the run here."""
    if (request := stop_requested()) is not None:
        raise request.error()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While inside: SIGINT and SIGTERM ask for a stop (commit what finished, stop the rest)
    instead of raising wherever the main thread happens to be; a second one stops at once.
    Only the main thread can install handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(number: int, _frame) -> None:
        if stop_requested() is not None:
            raise KeyboardInterrupt  # asked twice: stop now, whatever is in flight
        name = signal.Signals(number).name
        request_stop(
            f"stopped by {name}: finished rollouts are committed; continue it ({option('resume')})",
            cause="signal",
            signal_number=number,
        )

    previous = {number: signal.signal(number, on_signal) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
