"""Verifier worker processes: the one place a verification that needs a bound runs.

A verifier that never returns cannot be stopped on a thread: the thread is abandoned and spins
until the process exits (every hung verification of a long-lived flow process would leak one).
A process can be killed. So a verifier that declares `runs="worker"` (model-written code, a
sandbox, untrusted parsing) runs here under its own `timeout_s`, on the collector's path and on
reverify's alike: a worker that outlives the bound is killed with its process group and replaced
on the next demand, and the others carry on.

One pool per process, at most one worker per core, each started on first demand as a fresh
interpreter (the collector is multi-threaded; a forked child would inherit locks other threads
hold). A worker rebuilds the verifier from the environment's name and the verifier parameters,
never from a pickled closure: it imports the environment's entry point from its folder (which
registers the environment's own verifiers) and builds its resources server. A worker keeps
what it built, and runs one job at a time: a sandboxing verifier runs at most one sandbox per
worker, so one per core."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Protocol

from gymflow.core.processes import child_env
from gymflow.verifiers.oom import killed_since, oom_kills

if TYPE_CHECKING:
    from gymflow.core.records import Verification
    from gymflow.verifiers.base import VerifyInput

#: The bound on starting a worker and building the verifier in it (imports, loading a dataset):
#: not counted in the verification's own timeout, which is about the verifier.
BUILD_TIMEOUT_S = 300.0
#: How often a worker checks that its parent is still alive (a worker stuck in a verifier when
#: its parent is SIGKILLed would otherwise spin on as an orphan).
_ORPHAN_CHECK_S = 1.0
#: How often a caller waiting on a worker checks whether it was cancelled (a cancelled collector
#: must not wait out a hung verifier's bound before it can exit).
_ABANDON_CHECK_S = 0.1


class WorkerTimeout(Exception):
    """The job outlived its bound; its worker was killed."""


class WorkerFailed(Exception):
    """The worker died mid-job, or could not rebuild the verifier; the message says which."""


class Abandoned(Exception):
    """The caller gave up on the job (its task was cancelled); the worker was killed."""


class WorkerOutOfMemory(WorkerFailed):
    """The worker died by SIGKILL mid-job while the kernel counted an out-of-memory kill in its
    cgroup (`gymflow.verifiers.oom`): the host's or the cgroup's memory ran out, not a bug."""


class JobRejected(WorkerFailed):
    """The job could not run (a rollout that cannot be pickled, a verifier the worker cannot
    rebuild); the worker itself is sound."""


class Verifying(Protocol):
    """What a worker verifies with: a resources server, as `WorkerRef.build` makes it."""

    def verify_sync(self, inp: VerifyInput) -> Verification: ...


class WorkerRef(Protocol):
    """What a worker rebuilds its verifier from (gymflow.environments.verifier_ref.VerifierRef
    is one): picklable and hashable, so equal references share what a worker built."""

    @property
    def environment(self) -> str: ...

    def build(self) -> Verifying: ...


# -- the worker side ---------------------------------------------------------------------------
def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_ORPHAN_CHECK_S)
    os._exit(1)


def serve(fd: int) -> None:
    """A worker's loop on the socket `fd`: receive (ref, inputs), reply ("built" once per ref),
    then the verdicts. Started by `_Worker.start` as `python -c`."""
    conn = Connection(fd)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    # A worker killed with SIGKILL never removed its sandboxes' scratch folders (the model's
    # code among them): the next worker to start removes those of dead owners.
    from gymflow.verifiers.sandbox_host import sweep_orphans

    sweep_orphans()
    servers: dict[WorkerRef, Verifying] = {}
    while True:
        try:
            ref, inputs = conn.recv()
        except EOFError:  # the parent closed the pipe or exited
            return
        server = servers.get(ref)
        if server is None:
            try:
                server = ref.build()
            except Exception as exc:
                conn.send(("failed", f"{type(exc).__name__}: {exc}"))
                continue
            servers[ref] = server
            conn.send(("built", None))
        conn.send(("done", [server.verify_sync(inp) for inp in inputs]))


# -- the parent side ---------------------------------------------------------------------------
@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    built: set[WorkerRef] = field(default_factory=set)

    @classmethod
    def start(cls) -> _Worker:
        # A plain child interpreter, not multiprocessing's spawn: spawn re-runs the parent's main
        # script, which breaks any script without a __main__ guard. Its own session, so a kill
        # takes whatever the verifier started (a sandbox) with it.
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"from gymflow.verifiers.pool import serve; serve({theirs.fileno()})",
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # The parent's import path, as multiprocessing's spawn passes it: an environment
                # may import what a script or test runner put on it. gymflow's settings (where
                # environments and data are), not its keys: a worker judges, it calls no model.
                env=child_env(
                    prefixes=("GYMFLOW_", "HF_"),
                    set_to={"PYTHONPATH": os.pathsep.join(filter(None, sys.path))},
                ),
            )
        return cls(process, Connection(ours.detach()))

    def run(
        self,
        ref: WorkerRef,
        inputs: Sequence[VerifyInput],
        timeout: float | None,
        abandon: threading.Event,
    ) -> list[Verification]:
        """Send one job and wait for its verdicts. Raises WorkerTimeout, WorkerFailed or
        Abandoned; after any exception the worker must not be reused (a reply may be pending)."""
        try:
            job = pickle.dumps((ref, list(inputs)), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise JobRejected(f"cannot send the rollout to a verifier worker: {exc}") from None
        oom_before = oom_kills()
        try:
            self.conn.send_bytes(job)
        except (OSError, EOFError) as exc:
            raise WorkerFailed(f"verifier worker is gone ({exc})") from None
        built = ref in self.built
        while True:
            if not self._wait(timeout if built else BUILD_TIMEOUT_S, abandon):
                if not built:
                    raise WorkerFailed(
                        f"verifier worker did not load environment {ref.environment!r} "
                        f"within {BUILD_TIMEOUT_S:g}s"
                    )
                raise WorkerTimeout(f"no verdict within {timeout:g}s")
            try:
                kind, payload = self.conn.recv()
            except (OSError, EOFError):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(5)
                if self.process.returncode == -signal.SIGKILL and killed_since(oom_before):
                    raise WorkerOutOfMemory(
                        "verifier worker was killed by the out-of-memory killer mid-verification "
                        "(SIGKILL while the kernel counted an OOM kill in its memory cgroup)"
                    ) from None
                raise WorkerFailed(
                    f"verifier worker died mid-verification (exit code {self.process.returncode})"
                ) from None
            if kind == "built":
                self.built.add(ref)
                built = True
            elif kind == "failed":
                raise JobRejected(
                    f"verifier worker could not load environment {ref.environment!r}: {payload}"
                )
            else:
                return payload

    def _wait(self, seconds: float | None, abandon: threading.Event) -> bool:
        """True when a reply is ready within `seconds` (None: however long it takes)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            left = _ABANDON_CHECK_S if deadline is None else deadline - time.monotonic()
            if self.conn.poll(max(0.0, min(left, _ABANDON_CHECK_S))):
                return True
            if abandon.is_set():
                raise Abandoned("the verification was cancelled")
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def kill(self) -> None:
        """Kill the worker and everything it started (its own process group), and reap it."""
        if self.process.returncode is None:  # not reaped: its pid cannot have been reused
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.conn.close()

    def alive(self) -> bool:
        return self.process.poll() is None


class VerifierPool:
    """At most `size` workers, started on demand; a worker is lent to one job at a time."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._live = 0  # idle + lent + starting

    def run(
        self,
        ref: WorkerRef,
        inputs: Sequence[VerifyInput],
        timeout: float | None,
        abandon: threading.Event | None = None,
    ) -> list[Verification]:
        """Verify `inputs` in one worker, bounded by `timeout` seconds (None: unbounded) once the
        worker has the verifier built. Blocks while every worker is busy; setting `abandon` from
        another thread kills the worker and raises Abandoned."""
        abandon = abandon or threading.Event()
        worker = self._acquire(abandon)
        healthy = False
        try:
            verdicts = worker.run(ref, inputs, timeout, abandon)
            healthy = True
            return verdicts
        except JobRejected:
            healthy = True
            raise
        finally:
            self._release(worker, healthy)

    async def arun(
        self, ref: WorkerRef, inputs: Sequence[VerifyInput], timeout: float | None
    ) -> list[Verification]:
        """`run` for an event loop: on a thread, and a cancelled caller kills its worker, so
        the loop's executor is not left waiting out the bound at shutdown."""
        abandon = threading.Event()
        try:
            return await asyncio.to_thread(self.run, ref, inputs, timeout, abandon)
        except asyncio.CancelledError:
            abandon.set()
            raise

    def pids(self) -> list[int]:
        """The idle workers' process ids (the busy ones are lent out)."""
        with self._cond:
            return [worker.process.pid for worker in self._idle]

    def shutdown(self) -> None:
        """Stop the idle workers (lent ones stop when their job returns to a closed pool)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self.size = 0
        for worker in idle:
            worker.kill()

    def _acquire(self, abandon: threading.Event) -> _Worker:
        with self._cond:
            while not self._idle and self._live >= self.size:
                if self.size == 0:
                    raise WorkerFailed("the verifier pool was shut down")
                if abandon.is_set():
                    raise Abandoned("the verification was cancelled")
                self._cond.wait(_ABANDON_CHECK_S)
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            return _Worker.start()
        except BaseException:
            with self._cond:
                self._live -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        keep = healthy and worker.alive()
        with self._cond:
            keep = keep and self._live <= self.size
            if keep:
                self._idle.append(worker)
            else:
                self._live -= 1
            self._cond.notify()
        if not keep:
            worker.kill()


_pool: VerifierPool | None = None
_pool_lock = threading.Lock()


def worker_pool() -> VerifierPool:
    """This process's pool: one worker per core at most, stopped when the process exits."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.size == 0:
            _pool = VerifierPool(os.cpu_count() or 1)
            atexit.register(_pool.shutdown)
        return _pool
