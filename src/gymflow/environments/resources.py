"""The resources server: tools, per-rollout session state, and verification.

Used in-process by default (direct calls, no socket); an ASGI app can serve the same object on a
port. Environments with tools subclass it and register tool handlers."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from math import isfinite
from typing import Any, ClassVar

from gymflow.core.protocols import ToolError
from gymflow.core.records import Verification
from gymflow.core.statuses import VERIFIED, VERIFY_ERROR
from gymflow.core.tasks import Task
from gymflow.environments.manifest import Described
from gymflow.environments.verifier_ref import VerifierRef
from gymflow.verifiers.base import LENIENT_MATCH, VerifierError, VerifyInput, get_verifier
from gymflow.verifiers.pool import WorkerFailed, WorkerOutOfMemory, WorkerTimeout, worker_pool

ToolHandler = Callable[[dict[str, Any], dict[str, Any]], Any]
#: `threads` verifications (judge calls) waiting at once: the collector's default concurrency.
#: The process pool's one-per-core would let a judge with 1 s latency verify 2 rollouts a second.
IO_BOUND_THREADS = 64
_io_threads = ThreadPoolExecutor(IO_BOUND_THREADS, thread_name_prefix="gymflow-verify-io")


class ResourcesServer:
    """Stateless by default: no tools, and verification of the final answer only."""

    #: Responses API function tools this server offers, by name.
    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, env: Described, verifier_params: dict[str, Any] | None = None) -> None:
        self.env = env
        self.verifier = get_verifier(env.manifest.verifier.name)
        merged = {**env.manifest.verifier.params, **(verifier_params or {})}
        self.params = self.verifier.params(merged)
        self.verifier_version = self.verifier.version(self.params)
        self._sessions: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count()

    # -- tools ---------------------------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        """Every tool's schema (`tool_schemas`), as the model is offered them."""
        return list(self.tool_schemas.values())

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        """The tools offered on `task`: the same for every task unless a subclass varies them."""
        return self.tools()

    def handlers(self) -> dict[str, ToolHandler]:
        """name -> handler(state, arguments). Subclasses with tools override this."""
        return {}

    def initial_state(self, task: Task) -> dict[str, Any]:
        """A new session's state for `task`: empty unless a subclass with tools gives one."""
        return {}

    async def seed_session(self, task: Task) -> str:
        """Start a session for one rollout of `task`, from `initial_state(task)`; its id."""
        session_id = f"s{next(self._ids)}"
        self._sessions[session_id] = {"task": task, "state": self.initial_state(task)}
        return session_id

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool call on the session's state; what the model reads (JSON unless a
        string). A `ToolError` (bad input) goes back to the model; any other exception is the
        tool failing."""
        handler = self.handlers().get(name)
        if handler is None:
            raise ToolError(f"unknown tool {name!r}")
        result = handler(self._sessions[session_id]["state"], arguments)
        if isinstance(result, Awaitable):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, default=str)

    def final_state(self, session_id: str) -> dict[str, Any] | None:
        """The session's state as the rollout left it (None when it has none), for the verifier."""
        session = self._sessions.get(session_id)
        return session["state"] if session and session["state"] else None

    async def close_session(self, session_id: str) -> None:
        """Forget the session; closing one that is gone does nothing."""
        self._sessions.pop(session_id, None)

    # -- judging stored rollouts again -------------------------------------------------------
    def reverify_refusal(self, resources_url: str | None) -> str | None:
        """Why stored rollouts cannot be judged again here (None when they can): a verifier of
        live session state needs the session, which a stored rollout does not hold.
        `resources_url` is the server the run used, for servers that are not in-process."""
        if self.env.manifest.reverify_stateless:
            return None
        return (
            f"environment {self.env.name!r} verifies live session state "
            "(reverify_stateless: false), which stored rollouts do not hold"
        )

    def close(self) -> None:
        """Release what the server holds (a started process); nothing for an in-process one."""

    # -- verification --------------------------------------------------------------------------
    def verify_sync(self, inp: VerifyInput) -> Verification:
        """Run the verifier; an exception is a verifier error, never a reward of 0, and so is a
        reward that is no finite number (NaN would pass as a failing score and make every mean
        NaN; None stopped the run)."""
        try:
            verdict = self.verifier.fn(inp, self.params)
        except VerifierError as exc:
            return self.unjudged(exc.kind, str(exc))
        except Exception as exc:
            return self.unjudged("verifier_error", f"{type(exc).__name__}: {exc}")
        reward = getattr(verdict, "reward", None)
        details = dict(getattr(verdict, "details", None) or {})
        if LENIENT_MATCH not in details and _failed(reward, self.env.manifest.pass_threshold):
            read = self.lenient_reading(inp)
            if read is not None:
                details[LENIENT_MATCH] = read
        return self.judged(
            reward, getattr(verdict, "failure_kind", None), details, source="the verifier"
        )

    @cached_property
    def lenient_params(self) -> Any | None:
        """The verifier's lenient reading as validated parameters over this server's own
        (`VerifierSpec.lenient`); None when it declares none, or it reads the same."""
        if self.verifier.lenient is None:
            return None
        lenient = self.verifier.params({**self.params.model_dump(), **self.verifier.lenient})
        return None if lenient == self.params else lenient

    def lenient_reading(self, inp: VerifyInput) -> str | None:
        """What the verifier's lenient reading passes in this output (its extracted or matched
        text, at most 200 characters), or None when it passes nothing or cannot judge."""
        if self.lenient_params is None:
            return None
        try:
            verdict = self.verifier.fn(inp, self.lenient_params)
        except Exception:  # the strict reading judged it; a lenient one that cannot is no evidence
            return None
        if _failed(getattr(verdict, "reward", None), self.env.manifest.pass_threshold):
            return None
        details = getattr(verdict, "details", None) or {}
        read = details.get("extracted", details.get("matched", inp.output_text))
        return str(read)[:200]

    def judged(
        self, reward: object, failure_kind: str | None, details: dict[str, Any], *, source: str
    ) -> Verification:
        """A verdict's reward as stored: pass or fail by this environment's threshold, or a
        verifier error when it is no finite number. The same for a served resources server's
        verdict (`remote.py`), whose own `passed` is not taken."""
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not _finite(reward):
            reason = f"{source} returned {reward!r:.200}, not a finite reward"
            return self.unjudged("bad_reward", reason)
        low, high = self.env.manifest.reward_range
        if not low <= reward <= high:
            details = {**details, "out_of_range": True}
        passed = reward >= self.env.manifest.pass_threshold
        return Verification(self.verifier_version, VERIFIED, reward, passed, failure_kind, details)

    @property
    def text_only(self) -> bool:
        """Whether a verdict here is a pure function of the task and the output text (the
        verifier's own `text_only`), so a reverify may read nothing else and judge each distinct
        text once. A server that judges in its own way (its own `verify_sync`, `verify_many` or
        `verify_bounded`: NeMo Gym's posts the trajectory) is not, whatever its verifier says."""
        judges_as_declared = all(
            getattr(type(self), name) is getattr(ResourcesServer, name)
            for name in ("verify_sync", "verify_many", "verify_bounded")
        )
        return self.verifier.text_only and judges_as_declared

    @property
    def verify_timeout(self) -> float | None:
        """The verifier's own bound on one verification; None for an inline verifier."""
        return self.verifier.timeout_s

    def verify_bounded(self, inp: VerifyInput) -> Verification:
        """Verify in a worker process (gymflow.verifiers.pool), killed if it outlives
        `verify_timeout`. Blocks: call it off the event loop."""
        try:
            return worker_pool().run(self.worker_ref, [inp], self.verify_timeout)[0]
        except (WorkerTimeout, WorkerFailed) as exc:
            return self._bounded_failure(exc)

    def _bounded_failure(self, exc: WorkerTimeout | WorkerFailed) -> Verification:
        if isinstance(exc, WorkerTimeout) and self.verifier.outlived_bound_fails:
            details = {"reason": "timeout", "limit": "verifier_timeout_s", "error": str(exc)}
            return self.judged(0.0, None, details, source="the verifier's bound")
        if isinstance(exc, WorkerOutOfMemory) and self.verifier.outlived_bound_fails:
            # the answer's code (or what it returned) took the memory: the answer failing
            details = {"reason": "memory", "limit": "host_or_cgroup_memory", "error": str(exc)}
            return self.judged(0.0, None, details, source="the out-of-memory killer")
        if isinstance(exc, WorkerTimeout):
            return self.unjudged(
                "verifier_timeout",
                f"{exc} (the verifier's timeout_s); its worker process was killed",
            )
        return self.unjudged("verifier_error", str(exc))

    @functools.cached_property
    def worker_ref(self) -> VerifierRef:
        """How a verifier worker rebuilds this server (never a pickled closure)."""
        return VerifierRef.of(self.env, self.params.model_dump(mode="json"))

    # Where a verification runs is the verifier's own declaration (`runs`, see
    # gymflow.verifiers.base.Runs); these two methods, one for a batch and one for a rollout on
    # the event loop, are the only places that read it.
    def verify_many(self, inputs: Iterable[VerifyInput]) -> list[Verification]:
        """Verify a batch (reverify): `worker` verifiers through the worker pool, one rollout a
        job so a timeout costs one rollout, with one thread driving each worker; `threads` ones
        (judges) IO_BOUND_THREADS at once; `inline` ones one input at a time (pass a generator:
        a batch of inputs held at once costs memory and garbage-collector time). Light verifiers
        gain nothing from workers: arithmetic's takes ~6 us inline, and sending a rollout to a
        worker and its verdict back ~20 us."""
        match self.verifier.runs:
            case "inline":
                return [self.verify_sync(inp) for inp in inputs]
            case "threads":
                return list(_io_threads.map(self.verify_sync, inputs))
            case "worker":
                with ThreadPoolExecutor(max_workers=worker_pool().size) as threads:
                    return list(threads.map(self.verify_bounded, inputs))

    async def verify(
        self, session_id: str, task: Task, output_text: str, trajectory: list[dict[str, Any]]
    ) -> Verification:
        """Judge one rollout with the session's final state, where the verifier says it runs
        (inline, in threads, or in a worker process killed after `verify_timeout`)."""
        inp = VerifyInput(task, output_text, trajectory, self.final_state(session_id))
        match self.verifier.runs:
            case "inline":
                return self.verify_sync(inp)
            case "threads":
                return await self._verify_waiting(inp)
            case "worker":  # as verify_bounded, from the loop: a cancelled rollout kills its worker
                try:
                    return (await worker_pool().arun(self.worker_ref, [inp], self.verify_timeout))[
                        0
                    ]
                except (WorkerTimeout, WorkerFailed) as exc:
                    return self._bounded_failure(exc)

    async def _verify_waiting(self, inp: VerifyInput) -> Verification:
        """A `threads` verifier on a thread, so many wait at once. Its own network timeouts end
        it; past `verify_timeout` the rollout stops waiting (the thread ends with its call)."""
        loop = asyncio.get_running_loop()
        waiting = loop.run_in_executor(_io_threads, self.verify_sync, inp)
        try:
            return await asyncio.wait_for(waiting, self.verify_timeout)
        except TimeoutError:
            return self.unjudged(
                "verifier_timeout",
                f"no verdict within {self.verify_timeout:g}s (the verifier's timeout_s)",
            )

    def unjudged(self, kind: str, reason: str) -> Verification:
        """A verification that failed: `kind` and why, never a reward."""
        return Verification(
            self.verifier_version, VERIFY_ERROR, None, None, kind, {"error": reason}
        )


def _finite(reward: int | float) -> bool:
    # JSON bounds no integer's digits, and isfinite raises OverflowError on one past a float's
    # range (a served `"reward": 1` with 400 zeros) instead of answering False
    try:
        return isfinite(reward)
    except OverflowError:
        return False


def _failed(reward: object, threshold: float) -> bool:
    """A finite reward below the pass threshold (anything else is judged elsewhere)."""
    real = isinstance(reward, int | float) and not isinstance(reward, bool)
    return real and _finite(reward) and reward < threshold
