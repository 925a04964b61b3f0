"""The collector: runs rollouts concurrently on asyncio and commits them as they finish."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from gymflow.core import progress
from gymflow.core.protocols import ResourcesUnavailable
from gymflow.core.records import Rollout, rollout_id, rollout_seed
from gymflow.core.statuses import COMPLETED, FAILED
from gymflow.environments.remote import close_resources, open_resources
from gymflow.environments.resources import ResourcesServer
from gymflow.harness.base import get_harness
from gymflow.models.client import ResponsesClient
from gymflow.models.errors import RETRYABLE_KINDS
from gymflow.models.server_info import server_report
from gymflow.rollouts import stopping
from gymflow.rollouts.plan import RolloutKey, RunPlan
from gymflow.store.server_reports import record_server_report
from gymflow.store.writer import write_rollouts

#: Finished rollouts are committed in groups this large, or this often, or when the batch ends:
#: large enough that DuckDB commits stay cheap, small enough that a kill loses little (groups of
#: 1,000 cost a fifth less CPU, and a 1,000-rollout run then committed nothing before its end:
#: tests/faults/test_disk_full.py). A group due while the one before it is still being committed
#: grows until that commit ends, rather than its worker waiting: a waiting worker is a slot of
#: the window not taken.
FLUSH_EVERY = 200
FLUSH_INTERVAL_S = 0.5
#: A full group waits until this long after the last commit began: a commit costs about 20 ms
#: of CPU whatever its size (its fifteen statements: the rows, the seal records, the claim, the
#: generation), and a writer fast enough to take every group of 200 as it filled at zero model
#: latency committed twenty times a second, 40% of a core on two (bench/RESULTS.md, issue 45).
#: At most four a second: a kill loses at most this long of finished rollouts more. The first
#: group commits as soon as it is full.
FLUSH_SPACING_S = 0.25
#: Finished rollouts held while a commit runs before the next worker waits for it (memory).
MAX_PENDING = 10 * FLUSH_EVERY
#: The failure kinds `--resume` runs again: those the model client retries, and a served
#: resources server that could not be reached.
RESUMABLE_KINDS = (*RETRYABLE_KINDS, ResourcesUnavailable.kind)
#: How often a collector looks for a stop request (a signal, a cancellation, a dead server).
STOP_POLL_S = 0.1
#: DuckDB's buffer pool while the collector writes. Its default, 80% of RAM, keeps every block
#: written: backoffice (~30 KB of JSON a rollout) peaked at 850 MiB for 20,000 rollouts. Written
#: blocks are already on disk, so a small pool just evicts them: 438 MiB at this limit, for ~6%
#: more CPU (bench/e2e_rollouts.py). Reset when the collector ends, for the analyses that follow.
WRITE_MEMORY_LIMIT = "256MB"


#: How long a thread may hold the GIL while another waits for it. Python's default, 5 ms, lets the
#: writer thread (building rows, handing them to DuckDB) stall the event loop that long whenever
#: the loop wakes for a finished request; at 0.5 ms the collector runs ~15% more rollouts/s
#: (bench/e2e_rollouts.py: 3,900 -> 4,500 on 2 cores). Process-wide, and harmless elsewhere.
GIL_SWITCH_INTERVAL_S = 0.0005


def run_collect(plan: RunPlan, keys: list[RolloutKey], con, *, base_url: str) -> CollectStats:
    """Collect `keys` with a collector of their own (`Collector`)."""
    with Collector(plan, con, base_url=base_url) as collector:
        return collector.run(keys)


#: Young-generation threshold while collecting (Python's default is 700 container allocations).
GC_YOUNG_THRESHOLD = 10_000


class _RunLongGC:
    """Cyclic-GC settings while any collector runs in this process, restored when the last ends
    (local shards collect at once, one thread each).

    Rollouts in flight and awaiting their commit hold tens of thousands of containers (requests,
    trajectories, session states), and at Python's default young threshold they were promoted and
    set off a full collection every few hundred rollouts, each rescanning everything alive: the
    modules and the plan's tasks (a backoffice task holds its shop twice). Frozen, those are left
    out of every scan, and a young generation 14x larger makes the older collections 14x rarer.
    Backoffice, 20,000 rollouts (bench/e2e_rollouts.py): GC time 3.1 s -> 0.25 s."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collectors = 0
        self._thresholds = gc.get_threshold()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._collectors == 0:
                self._thresholds = gc.get_threshold()
                gc.freeze()
                gc.set_threshold(GC_YOUNG_THRESHOLD, *self._thresholds[1:])
            self._collectors += 1
        try:
            yield
        finally:
            with self._lock:
                self._collectors -= 1
                if self._collectors == 0:
                    gc.set_threshold(*self._thresholds)
                    gc.unfreeze()


_run_long_gc = _RunLongGC()


def _new_event_loop():
    try:
        import uvloop
    except ImportError:  # not built for this platform: asyncio's loop works, only slower
        return None
    return uvloop.new_event_loop


def _close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """What `asyncio.Runner` does on the way out, for a loop running on `thread`."""

    async def shut_down() -> None:
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()

    try:
        asyncio.run_coroutine_threadsafe(shut_down(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@dataclass
class CollectStats:
    attempted: int = 0
    completed: int = 0
    failed: int = 0


class Collector:
    """A run's collector, kept across its batches: one event loop (uvloop where it is installed:
    its C socket transport and scheduler take a third less CPU per rollout than asyncio's), one
    HTTP session to the model server, one resources server, one writer thread on one store
    connection, and one count of rollouts in a row that found the model server gone, so a dead
    server stops the run however its failures fall across batches.

    `run(keys)` collects one batch and returns once its rollouts are committed: the store, not
    this object, says what is done, so a batch's retry or a resume sees every finished rollout.
    Batches may run at once, from several threads (the flow keeps the next batch task started
    while one runs: `gymflow.flows.eval_shard.collect_plan`); they share one window of
    `concurrency` rollouts in flight, taken in the order the batches started, so a batch's
    tail and the next one's start overlap instead of draining the window to 0 between them."""

    def __init__(self, plan: RunPlan, con, *, base_url: str) -> None:
        self.plan = plan
        self.con = con
        self.base_url = base_url
        self.dead_server = stopping.DeadServerWatch(
            plan.config.stop_after_transport_failures, base_url
        )
        self._settings = contextlib.ExitStack()
        self._resources = contextlib.AsyncExitStack()
        self._loop: asyncio.AbstractEventLoop | None = None
        # The window: at most `concurrency` rollouts in flight across every batch running, and
        # a batch starts taking slots once the batch before it has started its last rollout
        # (`_collect`), so the next batch fills the slots the last one's tail frees.
        self._slots = asyncio.Semaphore(plan.config.concurrency)
        self._dispatched: asyncio.Event | None = None

    def __enter__(self) -> Collector:
        # what a real model server reports about itself (model, version): a factor of the run
        if self.plan.config.model.kind != "local" and self.base_url:
            record_server_report(self.con, server_report(self.base_url), str(self.plan.run_dir))
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        with contextlib.ExitStack() as settings:
            settings.enter_context(_run_long_gc())
            # The loop runs on a thread of its own for the collector's whole life, between
            # batches too: rollouts in flight keep going while a batch task ends and the next
            # begins (Prefect's bookkeeping, the store's look-up of what is missing).
            loop = (_new_event_loop() or asyncio.new_event_loop)()
            thread = threading.Thread(
                target=loop.run_forever, name="gymflow-collector", daemon=True
            )
            thread.start()
            settings.callback(_close_loop, loop, thread)
            self._loop = loop
            self._call(self._open())
            self._settings = settings.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._loop is not None:
                self._call(self._resources.aclose())
        finally:
            self._loop = None
            self._settings.close()

    def _call(self, coro):
        """Run `coro` on the collector's loop and wait for it, in the caller's context (a batch
        task's run context): in the context captured when the collector opened (the flow
        run's), 20,000 rollouts through `gym eval run` collected ~40% slower (bench/startup.py
        --large: 32.6 s against 22.7 s), for a reason in Prefect's context handling not pinned
        down. `run_coroutine_threadsafe` copies the calling thread's context."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _open(self) -> None:
        """Enter the resources on the collector's loop; `_resources` closes them in reverse
        order: the committer (its last commit drained), the resources server, the HTTP session."""
        config = self.plan.config
        self._client = await self._resources.enter_async_context(
            ResponsesClient(config.model, self.base_url, self.plan.sampling,
                            concurrency=config.concurrency)
        )  # fmt: skip
        self._server = open_resources(self.plan)  # in-process, or the config's resources_url
        self._resources.push_async_callback(close_resources, self._server)
        aggregate = getattr(self._server, "store_aggregate", None)
        if aggregate is not None and self.plan.config.shard.count == 1:
            # a NeMo Gym server's own metrics of the whole store, once the last commit is in
            self._resources.push_async_callback(aggregate, self.con, self.plan.run_dir)
        self._committer = _Committer(self.con)
        self._resources.callback(self._committer.close)

    def stop_request(self) -> stopping.StopRequest | None:
        return self.dead_server.tripped or stopping.stop_requested()

    def run(self, keys: list[RolloutKey]) -> CollectStats:
        if self._loop is None:
            raise RuntimeError("a Collector runs batches only inside its `with`")
        return self._call(self._collect(keys))

    async def _collect(self, keys: list[RolloutKey]) -> CollectStats:
        """Run `keys`, writing each rollout; a cancelled or crashing batch commits what finished.

        A stop request (`stopping`), or `stop_after_transport_failures` rollouts in a row that
        could not reach the model server (or the resources server), ends the batch early:
        rollouts in flight are dropped (`--resume` runs them), what finished is committed, and
        `RunStopped` is raised."""
        stats = CollectStats()
        if not keys:
            return stats
        if (request := self.stop_request()) is not None:
            raise request.error()
        plan, client, server, committer = self.plan, self._client, self._server, self._committer
        run_harness = get_harness(plan.harness)
        run_id = plan.run_id  # a hash of the whole config: computed once, not per rollout
        queue: asyncio.Queue[RolloutKey] = asyncio.Queue()
        for key in keys:
            queue.put_nowait(key)
        pending: list[Rollout] = []
        last_flush = time.monotonic()
        full_from = 0.0  # when a full group may commit: at once for the first

        async def flush() -> None:
            nonlocal last_flush, full_from
            last_flush = time.monotonic()
            full_from = last_flush + FLUSH_SPACING_S
            batch = pending.copy()
            pending.clear()
            await committer.commit(batch)

        async def watch_for_stop() -> stopping.StopRequest:
            while (request := self.stop_request()) is None:
                await asyncio.sleep(STOP_POLL_S)
            return request

        before, dispatched = self._dispatched, asyncio.Event()
        self._dispatched = dispatched

        async def worker() -> None:
            if before is not None:  # the window is the earlier batch's until its last start
                await before.wait()
            while self.stop_request() is None:
                async with self._slots:
                    try:
                        key = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        dispatched.set()
                        return
                    rollout = await run_one(plan, run_id, key, client, server, run_harness)
                stats.attempted += 1
                if rollout.status == COMPLETED:
                    stats.completed += 1
                else:
                    stats.failed += 1
                self.dead_server.saw(rollout.failure_kind, rollout.error)
                pending.append(rollout)
                now = time.monotonic()
                due = (len(pending) >= FLUSH_EVERY and now >= full_from) or (
                    now - last_flush > FLUSH_INTERVAL_S
                )
                if due and (not committer.busy or len(pending) >= MAX_PENDING):
                    await flush()

        workers = asyncio.gather(
            *(worker() for _ in range(min(plan.config.concurrency, len(keys))))
        )
        watcher = asyncio.ensure_future(watch_for_stop())
        stopped: stopping.StopRequest | None = None
        try:
            await asyncio.wait((workers, watcher), return_when=asyncio.FIRST_COMPLETED)
            if workers.done():
                workers.result()  # a worker's crash is the batch's
            if not (workers.done() and queue.empty()):
                stopped = self.stop_request()
        finally:
            dispatched.set()  # a stopped or crashed batch starts nothing more: the next may
            # Rollouts still in flight are dropped, not recorded: they never finished.
            workers.cancel()
            watcher.cancel()
            await asyncio.gather(workers, watcher, return_exceptions=True)
            await flush()
            await committer.drain()
        if stopped is not None:
            raise stopped.error()
        return stats


class _Committer:
    """Commits batches of rollouts on one writer thread, one batch at a time, so the event loop
    keeps serving model calls while DuckDB writes (it releases the GIL) and syncs its log: a
    commit takes tens to hundreds of milliseconds of wall time, which would otherwise stall
    every rollout in flight. A failed commit surfaces at the next commit or at the drain, and at
    every one after it: batches running at once share the committer, and each of them must
    hear that the store refused rollouts (which may have been its own)."""

    def __init__(self, con) -> None:
        self.con = con
        con.execute(f"SET memory_limit = '{WRITE_MEMORY_LIMIT}'")
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gymflow-store")
        self._in_flight: asyncio.Future[int] | None = None
        self._turn = asyncio.Lock()  # workers that flush at once take turns
        self._refused: BaseException | None = None

    async def commit(self, batch: list[Rollout]) -> None:
        async with self._turn:
            await self._settle()
            if batch:
                loop = asyncio.get_running_loop()
                self._in_flight = loop.run_in_executor(
                    self._thread, write_rollouts, self.con, batch
                )

    @property
    def busy(self) -> bool:
        """A commit is running (a finished one, even failed, is settled by the next call)."""
        return self._in_flight is not None and not self._in_flight.done()

    async def drain(self) -> None:
        """Wait for the batch being committed; raise what its commit raised."""
        async with self._turn:
            await self._settle()

    async def _settle(self) -> None:
        in_flight, self._in_flight = self._in_flight, None
        if self._refused is not None:
            raise self._refused
        if in_flight is not None:
            try:
                progress.advanced(await in_flight)
            except Exception as exc:
                self._refused = exc
                raise

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        # A store that refused a commit (disk full) may refuse this too; its error is raised.
        with contextlib.suppress(duckdb.Error):
            self.con.execute("RESET memory_limit")


async def run_one(
    plan: RunPlan,
    run_id: str,
    key: RolloutKey,
    client: ResponsesClient,
    server: ResourcesServer,
    run_harness,
) -> Rollout:
    task_id, repeat_index = key
    task = plan.task_by_id[task_id]
    seed = (
        rollout_seed(plan.sampling.seed, task_id, repeat_index)
        if plan.sampling.seed is not None
        else None
    )
    started = datetime.now(UTC)
    rollout = Rollout(
        rollout_id=rollout_id(run_id, task_id, repeat_index),
        run_id=run_id,
        task_id=task_id,
        repeat_index=repeat_index,
        seed=seed or 0,
        status=FAILED,
        started_at=started,
        finished_at=started,
        trajectory=[],
        calls=[],
    )
    session_id = None
    try:
        session_id = await server.seed_session(task)
        episode = await run_harness(
            client=client,
            server=server,
            session_id=session_id,
            task=task,
            prompt=plan.prompts[task_id],
            seed=seed,
            config=plan.config.harness,
        )
        rollout.trajectory, rollout.calls = episode.trajectory, episode.calls
        rollout.output_text, rollout.incomplete = episode.output_text, episode.incomplete
        rollout.num_turns, rollout.counters = episode.num_turns, episode.counters
        # a tool's server that failed and was gone past (as NeMo Gym's agent goes on), or an
        # agent's log left out of the record, is kept as what it is, beside the verdict or the
        # failure that followed
        failure = episode.error if episode.failure_kind is not None else None
        kept = [failure, *episode.tool_failures, *episode.left_out]
        rollout.error = "\n\n".join(filter(None, kept)) or None
        if episode.failure_kind is not None:
            rollout.failure_kind = episode.failure_kind
        else:
            rollout.status = COMPLETED
            rollout.verification = await server.verify(
                session_id, task, episode.output_text, episode.trajectory
            )
    except ResourcesUnavailable as exc:  # a served resources server stopped: `--resume` reruns
        rollout.status, rollout.verification = FAILED, None
        rollout.failure_kind, rollout.error = exc.kind, str(exc)
    except Exception as exc:  # a harness or resources-server bug must not take the batch down
        rollout.status, rollout.verification = FAILED, None
        rollout.failure_kind = "harness_error"
        rollout.error = "".join(traceback.format_exception_only(exc)).strip()
    finally:
        if session_id is not None:
            try:
                await server.close_session(session_id)
            except ResourcesUnavailable:  # a resources server that is gone took its sessions
                pass
            except Exception as exc:  # a clean-up that failed is kept; the batch goes on
                kept = "".join(traceback.format_exception_only(exc)).strip()
                closing = f"closing the rollout's session failed: {kept}"
                rollout.error = f"{rollout.error}\n\n{closing}" if rollout.error else closing
        rollout.finished_at = datetime.now(UTC)
    return rollout
