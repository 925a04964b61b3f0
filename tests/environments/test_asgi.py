"""The resources server over HTTP: sessions isolated, tool errors as output, served on a port."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from gymflow.environments.asgi import create_app
from gymflow.environments.registry import PATH_VARIABLE, load_environment
from gymflow.environments.scaffold import scaffold
from gymflow.models.local_server import free_port
from tests.conftest import GYM


@pytest.fixture
def notes_env(tmp_path: Path, monkeypatch):
    scaffold("notes", tmp_path)
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    return load_environment("notes")


def _client(env) -> httpx.AsyncClient:
    app = create_app(env.resources_server())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env")


def test_sessions_tools_and_verify(notes_env) -> None:
    task = notes_env.tasks()[3]

    async def scenario() -> None:
        async with _client(notes_env) as client:
            health = (await client.get("/health")).json()
            assert health == {
                "status": "ok",
                "environment": "notes",
                "verifier_version": health["verifier_version"],
                "tools": ["note"],
                "sessions": 0,
            }
            a, b = [
                (await client.post("/seed_session", json={"task_id": task.task_id})).json()
                for _ in range(2)
            ]
            assert a["session_id"] != b["session_id"]
            assert a["tools"][0]["name"] == "note"

            call = {"session_id": a["session_id"], "arguments": {"text": "first"}}
            assert (await client.post("/tools/note", json=call)).json() == {
                "output": '["first"]',
                "error": False,
            }
            # session b never sees a's notes
            call_b = {"session_id": b["session_id"], "arguments": {"text": "other"}}
            assert (await client.post("/tools/note", json=call_b)).json()["output"] == '["other"]'

            # bad input and unknown tools come back as tool output, not HTTP errors
            bad = await client.post("/tools/note", json={"session_id": a["session_id"]})
            assert bad.status_code == 200
            assert bad.json() == {"output": "error: note needs a non-empty 'text'", "error": True}
            unknown = await client.post("/tools/fly", json={"session_id": a["session_id"]})
            assert unknown.json() == {"output": "error: unknown tool 'fly'", "error": True}

            verdict = await client.post(
                "/verify",
                json={"session_id": a["session_id"], "output_text": task.reference},
            )
            assert verdict.json()["reward"] == 1.0 and verdict.json()["passed"] is True
            wrong = await client.post(
                "/verify",
                json={
                    "session_id": b["session_id"],
                    "output_text": task.distractor,
                    "close": False,
                },
            )
            assert wrong.json()["reward"] == 0.0
            assert (await client.get("/health")).json()["sessions"] == 1  # a closed, b kept

            gone = await client.post("/tools/note", json=call)
            assert gone.status_code == 404 and "unknown session" in gone.json()["detail"]
            missing = await client.post("/seed_session", json={"task_id": "notes-9999"})
            assert missing.status_code == 404
            malformed = await client.post("/seed_session", json={"task": 1})
            assert malformed.status_code == 422
            closed = await client.post("/close_session", json={"session_id": b["session_id"]})
            assert closed.json() == {"closed": b["session_id"]}

    asyncio.run(scenario())


def test_a_crashing_tool_is_reported_as_output(notes_env) -> None:
    server = notes_env.resources_server()
    server.handlers = lambda: {"note": lambda state, args: 1 / 0}
    app = create_app(server)

    async def scenario() -> dict:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
            seeded = (await client.post("/seed_session", json={"task_id": "notes-0000"})).json()
            call = {"session_id": seeded["session_id"], "arguments": {"text": "x"}}
            return (await client.post("/tools/note", json=call)).json()

    result = asyncio.run(scenario())
    assert result["error"] is True and result["crashed"] is True
    assert "ZeroDivisionError" in result["output"]


def test_gym_serve_environment_on_a_port(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [GYM, "serve", "environment", "arithmetic", "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()
            try:
                health = httpx.get(f"{base}/health", timeout=1).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        assert health["environment"] == "arithmetic" and health["tools"] == []
        session = httpx.post(f"{base}/seed_session", json={"task_id": "arith-00007"}).json()
        verdict = httpx.post(
            f"{base}/verify",
            json={"session_id": session["session_id"], "output_text": "Answer: 1"},
        ).json()
        assert verdict["status"] == "ok" and verdict["details"]["reason"] == "wrong_answer"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_serve_unknown_environment_fails(tmp_path: Path) -> None:
    result = subprocess.run(
        [GYM, "serve", "environment", "nope", "--port", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "unknown environment 'nope'" in result.stderr
