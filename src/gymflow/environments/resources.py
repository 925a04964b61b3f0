"""The resources server: tools, per-rollout session state, and verification.

Used in-process by default (direct calls, no socket); an ASGI app can serve the same object on a
port. Environments with tools subclass it and register tool handlers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from gymflow.environments.base import Environment, Task
from gymflow.records import VERIFIED, VERIFY_ERROR, Verification
from gymflow.verifiers.base import VerifierError, VerifyInput, get_verifier

ToolHandler = Callable[[dict[str, Any], dict[str, Any]], Any]
#: The bound on a heavy verifier (sandbox, judge) whose environment sets no verify_timeout_s.
HEAVY_VERIFY_TIMEOUT_S = 300.0


class ToolError(Exception):
    """A tool refused its input. The message goes back to the model as the tool's output."""


class ResourcesServer:
    """Stateless by default: no tools, and verification of the final answer only."""

    #: Responses API function tools this server offers, by name.
    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, env: Environment, verifier_params: dict[str, Any] | None = None) -> None:
        self.env = env
        self.verifier = get_verifier(env.manifest.verifier.name)
        merged = {**env.manifest.verifier.params, **(verifier_params or {})}
        self.params = self.verifier.params(merged)
        self.verifier_version = self.verifier.version(self.params)
        self._sessions: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count()

    # -- tools ---------------------------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return list(self.tool_schemas.values())

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        """The tools offered on `task`: the same for every task unless a subclass varies them."""
        return self.tools()

    def handlers(self) -> dict[str, ToolHandler]:
        """name -> handler(state, arguments). Subclasses with tools override this."""
        return {}

    def initial_state(self, task: Task) -> dict[str, Any]:
        return {}

    async def seed_session(self, task: Task) -> str:
        session_id = f"s{next(self._ids)}"
        self._sessions[session_id] = {"task": task, "state": self.initial_state(task)}
        return session_id

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        handler = self.handlers().get(name)
        if handler is None:
            raise ToolError(f"unknown tool {name!r}")
        result = handler(self._sessions[session_id]["state"], arguments)
        if isinstance(result, Awaitable):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, default=str)

    def final_state(self, session_id: str) -> dict[str, Any] | None:
        session = self._sessions.get(session_id)
        return session["state"] if session and session["state"] else None

    async def close_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    # -- verification --------------------------------------------------------------------------
    def verify_sync(self, inp: VerifyInput) -> Verification:
        """Run the verifier; an exception is a verifier error, never a reward of 0."""
        try:
            verdict = self.verifier.fn(inp, self.params)
        except VerifierError as exc:
            return Verification(
                self.verifier_version, VERIFY_ERROR, None, None, exc.kind, {"error": str(exc)}
            )
        except Exception as exc:
            return Verification(
                self.verifier_version,
                VERIFY_ERROR,
                None,
                None,
                "verifier_error",
                {"error": f"{type(exc).__name__}: {exc}"},
            )
        low, high = self.env.manifest.reward_range
        passed = verdict.reward >= self.env.manifest.pass_threshold
        details = dict(verdict.details)
        if not low <= verdict.reward <= high:
            details["out_of_range"] = True
        return Verification(self.verifier_version, VERIFIED, verdict.reward, passed, None, details)

    async def verify(
        self, session_id: str, task: Task, output_text: str, trajectory: list[dict[str, Any]]
    ) -> Verification:
        inp = VerifyInput(task, output_text, trajectory, self.final_state(session_id))
        timeout = self.env.manifest.verify_timeout_s
        if timeout is None and not self.heavy_verification:
            return self.verify_sync(inp)
        timeout = timeout or HEAVY_VERIFY_TIMEOUT_S
        try:
            return await _in_daemon_thread(self.verify_sync, inp, timeout=timeout)
        except TimeoutError:
            return Verification(
                self.verifier_version,
                VERIFY_ERROR,
                None,
                None,
                "verifier_timeout",
                {"error": f"no verdict within {timeout:g}s (verify_timeout_s)"},
            )

    #: Set by environments whose verifier is slow (sandboxes, judges) to keep the loop responsive.
    heavy_verification: bool = False


async def _in_daemon_thread(fn: Callable[[VerifyInput], Verification], inp, *, timeout: float):
    """Run `fn(inp)` on a daemon thread, waiting at most `timeout` seconds.

    A daemon thread, not the loop's executor: a verifier that never returns is abandoned, and an
    executor's worker would be joined at exit, hanging the process the timeout was meant to save."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Verification] = loop.create_future()

    def settle(result: Verification | None, error: BaseException | None) -> None:
        if future.done():  # timed out already
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            outcome = (fn(inp), None)
        except BaseException as exc:  # verify_sync catches verifier errors; this is a bug in it
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed while this verifier hung
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name="gymflow-verify", daemon=True).start()
    return await asyncio.wait_for(future, timeout)
