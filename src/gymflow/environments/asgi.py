"""The resources server over HTTP: an ASGI app around one `ResourcesServer`.

    POST /seed_session   {"task_id", "split"?}   -> {"session_id", "session_token", "tools"}
    POST /tools/{name}   {"session_id", "arguments"}           -> {"output", "error"}
    POST /verify         {"session_id", "output_text", "trajectory"?, "close"?} -> verification
    POST /close_session  {"session_id"}                        -> {"closed"}
    GET  /health                                               -> {"status": "ok", ...}

Served, every route but /health needs the server's access key (`Authorization: Bearer KEY`,
compared in constant time; a missing or wrong one is a 401 before the body is read): a session
cap shared by every caller let any local user seed 10,000 sessions in 4 s and lock every run
out for the idle time. /health says whether the key it was sent is the server's, never the key.

A tool's failure is the tool's output (`error: true`, status 200): the model reads it and may try
again; only a request the server cannot route (unknown session or task, a body that is not the
expected shape) is an HTTP error. Each session holds its own state, so concurrent rollouts never
see each other's changes.

A session belongs to the caller that seeded it. Its id is unguessable, and every later request
on it carries the token the seed returned, in the `X-Gymflow-Session-Token` header: with ids
`s0, s1, ...` and no check, another local user drove a run's session (cancelled its order, sent
its email) and the run's own /verify gave reward 1.0. A wrong or missing token is answered as an
unknown session is (404), so a guess learns nothing.

Sessions are bounded: at most `max_sessions` open at once (a seed past it is a 503 saying so,
with Retry-After), and a session no request has touched for `session_idle_s` is closed (its
state freed). Unbounded, any caller could seed sessions until the server's memory ran out. A
session with a request in progress (a long /verify) is never idle."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from gymflow.core.protocols import (
    ACCESS_KEY_HEADER,
    SESSION_TOKEN_HEADER,
    ToolError,
    ToolServerError,
    bearer,
)
from gymflow.core.same_text import same_text
from gymflow.core.tasks import Task
from gymflow.environments.resources import ResourcesServer


class SeedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    split: str | None = None


class ToolRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    output_text: str = ""
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    close: bool = Field(True, description="End the session once verified.")


class SessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str


Token = Annotated[str | None, Header(alias=SESSION_TOKEN_HEADER)]


#: Sessions open at once, by default: far above a run's concurrency (at most 4096), far below
#: what exhausts a server's memory (a backoffice session is a few KiB).
MAX_SESSIONS = 10_000
#: A session untouched this long is closed: longer than a rollout waits on its model between
#: two requests (a call's timeout times its retries), far shorter than forever.
SESSION_IDLE_S = 1800.0


@dataclass(slots=True)
class _Session:
    internal_id: str  # the resources server's own (deterministic) session id
    task: Task
    token: str
    used_at: float
    busy: int = 0  # requests on it in progress


class _Sessions:
    """The sessions handed out, least recently used first, bounded in number and idle time."""

    def __init__(
        self,
        server: ResourcesServer,
        max_sessions: int,
        idle_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server, self.max_sessions, self.idle_s = server, max_sessions, idle_s
        self.clock = clock
        self._open: OrderedDict[str, _Session] = OrderedDict()  # the id handed out -> session

    def __len__(self) -> int:
        return len(self._open)

    async def expire(self) -> None:
        """Close the sessions idle for `idle_s` (amortised O(1): the oldest are first)."""
        now = self.clock()
        while self._open:
            session_id, session = next(iter(self._open.items()))
            if now - session.used_at < self.idle_s:
                return
            if session.busy:  # not idle: a request on it is in progress
                session.used_at = now
                self._open.move_to_end(session_id)
                continue
            await self.close(session_id)

    async def seed(self, task: Task) -> tuple[str, str]:
        await self.expire()
        if len(self._open) >= self.max_sessions:
            raise HTTPException(
                503,
                f"resources server full: {self.max_sessions} sessions open, the most it keeps; "
                f"close finished sessions (/close_session, or /verify with close) or wait: a "
                f"session untouched for {self.idle_s:g} s is closed",
                headers={"Retry-After": "5"},
            )
        session_id, token = secrets.token_urlsafe(16), secrets.token_urlsafe(32)
        internal = await self.server.seed_session(task)
        self._open[session_id] = _Session(internal, task, token, self.clock())
        return session_id, token

    @contextlib.asynccontextmanager
    async def use(self, session_id: str, token: str | None) -> AsyncIterator[_Session]:
        """The caller's session, touched before and after the request it serves."""
        await self.expire()
        session = self._open.get(session_id)
        if session is None or not same_text(token or "", session.token):
            raise HTTPException(404, f"unknown session {session_id[:64]!r} for this caller")
        session.busy += 1
        self._touch(session_id, session)
        try:
            yield session
        finally:
            session.busy -= 1
            if session_id in self._open:
                self._touch(session_id, session)

    def _touch(self, session_id: str, session: _Session) -> None:
        session.used_at = self.clock()
        self._open.move_to_end(session_id)

    async def close(self, session_id: str) -> None:
        session = self._open.pop(session_id, None)
        if session is not None:
            await self.server.close_session(session.internal_id)


def _find_task(server: ResourcesServer, task_id: str, split: str | None) -> Task:
    manifest = server.env.manifest
    splits = [split] if split else [manifest.default_split, *manifest.splits]
    for name in dict.fromkeys(splits):
        try:
            tasks = server.env.tasks(name)
        except KeyError as exc:
            raise HTTPException(404, str(exc).strip('"')) from None
        for task in tasks:
            if task.task_id == task_id:
                return task
    raise HTTPException(404, f"environment {server.env.name!r} has no task {task_id!r}")


#: Longest request body read: a long rollout's trajectory is a few MiB. Unbounded, a 400 MB
#: /verify for an unknown session was read whole first (the server grew by 430 MB, kept).
MAX_BODY_BYTES = 64 << 20


class _BoundedBody:
    """ASGI middleware: a body over MAX_BODY_BYTES is a 413 before the app reads any of it (a
    declared Content-Length over it at once, a streamed one as soon as it passes the bound)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        too_big = f"request body over {MAX_BODY_BYTES >> 20} MiB"
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await _refuse(send, 413, too_big)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the caller went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY_BYTES:
                await _refuse(send, 413, too_big)
                return
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _sent_key(scope) -> bytes:
    return dict(scope.get("headers") or ()).get(ACCESS_KEY_HEADER.lower().encode(), b"")


class _KeyRequired:
    """ASGI middleware: a request on any route but /health without the access key is a 401,
    answered before the body is read (an unauthenticated caller costs the server nothing)."""

    def __init__(self, app, key: str) -> None:
        self.app, self.expected = app, bearer(key).encode()

    async def __call__(self, scope, receive, send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] == "/health"
            or secrets.compare_digest(_sent_key(scope), self.expected)
        ):
            await self.app(scope, receive, send)
            return
        said = "a wrong access key" if _sent_key(scope) else "no access key"
        await _refuse(
            send,
            401,
            f"this resources server needs its access key (Authorization: Bearer KEY) and was "
            f"sent {said}: the key `gym serve environment` was given (--key-env) or wrote "
            "(the file it printed)",
            [(b"www-authenticate", b"Bearer")],
        )


async def _refuse(
    send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    content = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def create_app(
    server: ResourcesServer,
    *,
    max_sessions: int = MAX_SESSIONS,
    session_idle_s: float = SESSION_IDLE_S,
    clock: Callable[[], float] = time.monotonic,
    access_key: str | None = None,
) -> FastAPI:
    """The app around `server`. `access_key` None checks no caller: for in-process use only
    (no socket: `gym env validate`, tests); `gym serve environment` always gives one."""
    app = FastAPI(title=f"gymflow resources server: {server.env.name}")
    app.add_middleware(_BoundedBody)
    if access_key is not None:
        app.add_middleware(_KeyRequired, key=access_key)  # outermost: before the body is read
    sessions = _Sessions(server, max_sessions, session_idle_s, clock)

    @app.get("/health")
    async def health(
        authorization: Annotated[str | None, Header(alias=ACCESS_KEY_HEADER)] = None,
    ) -> dict[str, Any]:
        await sessions.expire()
        accepted = access_key is None or same_text(authorization or "", bearer(access_key))
        return {
            "status": "ok",
            "key_required": access_key is not None,
            "key_accepted": accepted,
            "environment": server.env.name,
            "verifier_version": server.verifier_version,
            "tools": [tool["name"] for tool in server.tools()],
            "sessions": len(sessions),
            "max_sessions": sessions.max_sessions,
            "session_idle_s": sessions.idle_s,
        }

    @app.post("/seed_session")
    async def seed_session(request: SeedRequest) -> dict[str, Any]:
        task = _find_task(server, request.task_id, request.split)
        session_id, token = await sessions.seed(task)
        return {
            "session_id": session_id,
            "session_token": token,
            "task_id": task.task_id,
            "tools": server.tools_for(task),
        }

    @app.post("/tools/{name}")
    async def call_tool(name: str, request: ToolRequest, token: Token = None) -> dict[str, Any]:
        async with sessions.use(request.session_id, token) as session:
            try:
                output = await server.call_tool(session.internal_id, name, request.arguments)
            except ToolServerError as exc:  # its answer for the model, its failure for the run
                return {"output": exc.model_output(), "error": True, "server_error": str(exc)}
            except ToolError as exc:
                return {"output": exc.model_output(), "error": True}
            except Exception as exc:  # a tool bug is reported to the caller, not a dead server
                return {
                    "output": f"error: tool {name!r} failed: {type(exc).__name__}: {exc}",
                    "error": True,
                    "crashed": True,
                }
        return {"output": output, "error": False}

    @app.post("/verify")
    async def verify(request: VerifyRequest, token: Token = None) -> dict[str, Any]:
        async with sessions.use(request.session_id, token) as session:
            verification = await server.verify(
                session.internal_id, session.task, request.output_text, request.trajectory
            )
        if request.close:
            await sessions.close(request.session_id)
        return asdict(verification)

    @app.post("/close_session")
    async def close_session(request: SessionRequest, token: Token = None) -> dict[str, Any]:
        async with sessions.use(request.session_id, token):
            pass
        await sessions.close(request.session_id)
        return {"closed": request.session_id}

    return app
