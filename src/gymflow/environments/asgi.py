"""The resources server over HTTP: an ASGI app around one `ResourcesServer`.

    POST /seed_session   {"task_id", "split"?}                 -> {"session_id", "tools"}
    POST /tools/{name}   {"session_id", "arguments"}           -> {"output", "error"}
    POST /verify         {"session_id", "output_text", "trajectory"?, "close"?} -> verification
    POST /close_session  {"session_id"}                        -> {"closed"}
    GET  /health                                               -> {"status": "ok", ...}

A tool's failure is the tool's output (`error: true`, status 200): the model reads it and may try
again; only a request the server cannot route (unknown session or task, a body that is not the
expected shape) is an HTTP error. Each session holds its own state, so concurrent rollouts never
see each other's changes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from gymflow.core.protocols import ToolError
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


def create_app(server: ResourcesServer) -> FastAPI:
    app = FastAPI(title=f"gymflow resources server: {server.env.name}")
    tasks: dict[str, Task] = {}  # session_id -> task, for /verify

    def task_of(session_id: str) -> Task:
        if session_id not in tasks:
            raise HTTPException(404, f"unknown session {session_id!r}")
        return tasks[session_id]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "environment": server.env.name,
            "verifier_version": server.verifier_version,
            "tools": [tool["name"] for tool in server.tools()],
            "sessions": len(tasks),
        }

    @app.post("/seed_session")
    async def seed_session(request: SeedRequest) -> dict[str, Any]:
        task = _find_task(server, request.task_id, request.split)
        session_id = await server.seed_session(task)
        tasks[session_id] = task
        return {"session_id": session_id, "task_id": task.task_id, "tools": server.tools_for(task)}

    @app.post("/tools/{name}")
    async def call_tool(name: str, request: ToolRequest) -> dict[str, Any]:
        task_of(request.session_id)
        try:
            output = await server.call_tool(request.session_id, name, request.arguments)
        except ToolError as exc:
            return {"output": f"error: {exc}", "error": True}
        except Exception as exc:  # a tool bug is reported to the caller, not a dead server
            return {
                "output": f"error: tool {name!r} failed: {type(exc).__name__}: {exc}",
                "error": True,
                "crashed": True,
            }
        return {"output": output, "error": False}

    @app.post("/verify")
    async def verify(request: VerifyRequest) -> dict[str, Any]:
        task = task_of(request.session_id)
        verification = await server.verify(
            request.session_id, task, request.output_text, request.trajectory
        )
        if request.close:
            await _close(request.session_id)
        return asdict(verification)

    @app.post("/close_session")
    async def close_session(request: SessionRequest) -> dict[str, Any]:
        task_of(request.session_id)
        await _close(request.session_id)
        return {"closed": request.session_id}

    async def _close(session_id: str) -> None:
        tasks.pop(session_id, None)
        await server.close_session(session_id)

    return app
