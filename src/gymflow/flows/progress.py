"""A flow run's collection progress in the Prefect UI: its progress artifact and log lines count
rollouts stored, and move as the collector commits them. Counting batches or shards would not:
an unsharded run of up to 2,000 rollouts is one batch, and sat at "0 of 1" until it ended."""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
import time
from types import TracebackType
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import ProgressArtifact, update_progress_artifact
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
)

from gymflow.core import progress
from gymflow.flows.artifacts import PROGRESS_KEY, publish

#: At most one artifact update this often: the collector commits every 0.5 s.
PUBLISH_S = 2.0
#: A log line at each tenth of the run, and at least this often while rollouts are stored.
LOG_EVERY_S = 30.0


#: How the progress artifact's description begins: what `stored_by` reads back.
STORED = "{stored} of {total} rollouts stored"


def stored_by(client: SyncPrefectClient, flow_run_id: UUID) -> int | None:
    """The rollouts a flow run in another process has stored, as its progress artifact says
    (None: no progress published yet): how a run follows its shards on a work pool."""
    [artifact] = client.read_artifacts(
        artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[PROGRESS_KEY]),
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
        ),
        limit=1,
    ) or [None]
    stored = STORED.format(stored=r"(\d+)", total=r"\d+")
    found = re.match(stored, (artifact and artifact.description) or "")
    return int(found.group(1)) if found else None


class RunProgress:
    """Listens to the collector (`gymflow.core.progress`) while inside. The collector reports from
    its event loop, so this only counts there; a thread of its own publishes, from the artifact's
    creation on, and neither a commit nor the run's start waits for the Prefect API. A failed
    shard does not count: a run whose last shard failed stops short of 100%."""

    def __init__(self, total: int, shards: int = 0) -> None:
        self.total, self.shards = total, shards
        self.stored = self.shards_done = self.shards_failed = 0
        self._lock = threading.Lock()
        self._changed, self._closing = threading.Event(), threading.Event()
        self._logger = get_run_logger()
        self._logged = (0, time.monotonic())  # (tenths of the run, when) of the last line
        self._logged_stored = 0
        #: made by the publisher's first publish, in the flow run's context (whose artifact it
        #: is): its API round trip no longer holds up the run's registration
        self.artifact_id: UUID | None = None
        self._thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self._publisher,), name="gymflow-progress"
        )
        self._listening = contextlib.ExitStack()

    # the collector's side (gymflow.core.progress.ProgressListener)
    def started(self, total: int) -> None:
        """The flow gave the total already (a shard's subflow reports only its own)."""

    def advanced(self, count: int) -> None:
        with self._lock:
            self.stored += count
        self._changed.set()

    def said(self, text: str) -> None:
        """In the flow run's log, where the Prefect UI shows it."""
        self._logger.warning(text, extra={progress.NOTICE: True})

    def shard_finished(self, done: int, failed: int) -> None:
        with self._lock:
            self.shards_done, self.shards_failed = done, failed
        self._changed.set()

    def description(self) -> str:
        text = STORED.format(stored=self.stored, total=self.total)
        if self.shards:
            text += f"; {self.shards_done} of {self.shards} shards finished"
        if self.shards_failed:
            text += f"; {self.shards_failed} FAILED (retry this flow run to re-run them)"
        return text

    def percent(self) -> float:
        return min(100.0, 100.0 * self.stored / self.total) if self.total else 100.0

    def _publish(self, final: bool = False) -> None:
        with self._lock:
            description, percent, stored = self.description(), self.percent(), self.stored
        if self.artifact_id is None:
            [self.artifact_id] = publish(
                ProgressArtifact(key=PROGRESS_KEY, progress=percent, description=description)
            )
        else:
            update_progress_artifact(self.artifact_id, progress=percent, description=description)
        tenths, now = int(percent // 10), time.monotonic()
        last_tenths, last_time = self._logged
        due = tenths > last_tenths or now - last_time >= LOG_EVERY_S or final
        if due and stored != self._logged_stored:
            self._logger.info("progress: %s (%.0f%%)", description, percent)
            self._logged, self._logged_stored = (tenths, now), stored

    def _publisher(self) -> None:
        with contextlib.suppress(Exception):  # an API hiccup: the next change publishes again
            self._publish()
        while not self._closing.wait(PUBLISH_S):
            if self._changed.is_set():
                self._changed.clear()
                try:
                    self._publish()
                except Exception:  # an API hiccup: the next change publishes again
                    continue

    def __enter__(self) -> RunProgress:
        self._listening.enter_context(progress.listening(self))
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._listening.close()
        self._closing.set()
        self._thread.join()
        if kind is None:
            self._publish(final=True)
            return
        with contextlib.suppress(Exception):  # the error on its way out is the one to see
            self._publish(final=True)
