"""The resources server over HTTP: sessions isolated, tool errors as output, served on a port."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import duckdb
import httpx
import pytest

from gymflow.builtin.backoffice.tasks import play
from gymflow.core.protocols import SESSION_TOKEN_HEADER
from gymflow.environments.asgi import MAX_SESSIONS, SESSION_IDLE_S, create_app
from gymflow.environments.registry import PATH_VARIABLE, load_environment
from gymflow.environments.scaffold import scaffold
from gymflow.rollouts.validate import validate_config
from gymflow.simulated.local_server import free_port
from gymflow.verifiers.base import VerifyInput
from tests.conftest import GYM, gym
from tests.environments.test_workbench import executed_calls


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
                "key_required": False,  # in-process: no socket, no key
                "key_accepted": True,
                "environment": "notes",
                "verifier_version": health["verifier_version"],
                "tools": ["note"],
                "sessions": 0,
                "max_sessions": MAX_SESSIONS,
                "session_idle_s": SESSION_IDLE_S,
            }
            a, b = [
                (await client.post("/seed_session", json={"task_id": task.task_id})).json()
                for _ in range(2)
            ]
            assert a["session_id"] != b["session_id"]
            assert a["tools"][0]["name"] == "note"
            of_a, of_b = _token(a), _token(b)

            call = {"session_id": a["session_id"], "arguments": {"text": "first"}}
            assert (await client.post("/tools/note", json=call, headers=of_a)).json() == {
                "output": '["first"]',
                "error": False,
            }
            # session b never sees a's notes
            call_b = {"session_id": b["session_id"], "arguments": {"text": "other"}}
            noted = await client.post("/tools/note", json=call_b, headers=of_b)
            assert noted.json()["output"] == '["other"]'
            # a session answers only the caller that seeded it
            for headers in (None, of_b):
                taken = await client.post("/tools/note", json=call, headers=headers)
                assert taken.status_code == 404 and "unknown session" in taken.json()["detail"]

            # bad input and unknown tools come back as tool output, not HTTP errors
            only_a = {"session_id": a["session_id"]}
            bad = await client.post("/tools/note", json=only_a, headers=of_a)
            assert bad.status_code == 200
            assert bad.json() == {"output": "error: note needs a non-empty 'text'", "error": True}
            unknown = await client.post("/tools/fly", json=only_a, headers=of_a)
            assert unknown.json() == {"output": "error: unknown tool 'fly'", "error": True}

            verdict = await client.post(
                "/verify",
                json={"session_id": a["session_id"], "output_text": task.reference},
                headers=of_a,
            )
            assert verdict.json()["reward"] == 1.0 and verdict.json()["passed"] is True
            wrong = await client.post(
                "/verify",
                json={
                    "session_id": b["session_id"],
                    "output_text": task.distractor,
                    "close": False,
                },
                headers=of_b,
            )
            assert wrong.json()["reward"] == 0.0
            assert (await client.get("/health")).json()["sessions"] == 1  # a closed, b kept

            gone = await client.post("/tools/note", json=call, headers=of_a)
            assert gone.status_code == 404 and "unknown session" in gone.json()["detail"]
            missing = await client.post("/seed_session", json={"task_id": "notes-9999"})
            assert missing.status_code == 404
            malformed = await client.post("/seed_session", json={"task": 1})
            assert malformed.status_code == 422
            closed = await client.post(
                "/close_session", json={"session_id": b["session_id"]}, headers=of_b
            )
            assert closed.json() == {"closed": b["session_id"]}

    asyncio.run(scenario())


def _token(seeded: dict) -> dict[str, str]:
    """The header every later request on a seeded session carries."""
    return {SESSION_TOKEN_HEADER: seeded["session_token"]}


def test_a_crashing_tool_is_reported_as_output(notes_env) -> None:
    server = notes_env.resources_server()
    server.handlers = lambda: {"note": lambda state, args: 1 / 0}
    app = create_app(server)

    async def scenario() -> dict:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
            seeded = (await client.post("/seed_session", json={"task_id": "notes-0000"})).json()
            call = {"session_id": seeded["session_id"], "arguments": {"text": "x"}}
            return (await client.post("/tools/note", json=call, headers=_token(seeded))).json()

    result = asyncio.run(scenario())
    assert result["error"] is True and result["crashed"] is True
    assert "ZeroDivisionError" in result["output"]


def test_a_tool_server_error_crosses_the_wire_as_itself(notes_env) -> None:
    """A NeMo Gym environment served by gymflow: a tool route's 500 reaches the run's side as
    the answer the model reads and the failure kept on the rollout, not as a refusal."""
    from gymflow.core.config import EvalConfig
    from gymflow.core.protocols import ToolServerError
    from gymflow.environments.remote import RemoteResourcesServer
    from gymflow.rollouts.plan import resolve

    def failed(state, arguments):
        raise ToolServerError("tool route /note answered 500: boom", output='{"detail":"boom"}')

    server = notes_env.resources_server()
    server.handlers = lambda: {"note": failed}
    plan = resolve(EvalConfig(environment="notes", resources_url="http://env"))
    remote = RemoteResourcesServer("http://env", plan)

    async def scenario() -> ToolServerError:
        await remote.aclose()
        transport = httpx.ASGITransport(app=create_app(server))
        remote._http = httpx.AsyncClient(transport=transport, base_url="http://env")
        try:
            session = await remote.seed_session(plan.all_tasks[0])
            with pytest.raises(ToolServerError) as raised:
                await remote.call_tool(session, "note", {"text": "x"})
            return raised.value
        finally:
            await remote.aclose()

    error = asyncio.run(scenario())
    assert (str(error), error.model_output()) == (
        "tool route /note answered 500: boom",
        '{"detail":"boom"}',
    )


#: The access key the served environment is started with (--key-env), and its variable.
KEY_VAR, KEY = "GYMFLOW_TEST_RESOURCES_KEY", "k" * 32
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served_backoffice(tmp_path_factory: pytest.TempPathFactory):
    """`gym serve environment backoffice` on a free port, stopped after the module."""
    port = free_port()
    process = subprocess.Popen(
        [GYM, "serve", "environment", "backoffice", "--port", str(port), "--key-env", KEY_VAR],
        cwd=tmp_path_factory.mktemp("serve"),
        env={**os.environ, KEY_VAR: KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()
            try:
                httpx.get(f"{base}/health", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_gym_serve_environment_on_a_port(served_backoffice: str) -> None:
    base = served_backoffice
    health = httpx.get(f"{base}/health").json()
    assert health["environment"] == "backoffice" and "create_order" in health["tools"]
    session = httpx.post(
        f"{base}/seed_session", json={"task_id": "backoffice-00007"}, headers=AUTH
    ).json()
    refused = httpx.post(
        f"{base}/tools/restock",
        json={"session_id": session["session_id"], "arguments": {"sku": "nope", "quantity": 1}},
        headers={**_token(session), **AUTH},
    ).json()
    assert refused == {"output": "error: no product 'nope'", "error": True}
    verdict = httpx.post(
        f"{base}/verify",
        json={"session_id": session["session_id"], "output_text": ""},
        headers={**_token(session), **AUTH},
    ).json()
    assert verdict["status"] == "ok" and verdict["details"]["reason"] == "state_differs"


def test_a_run_uses_a_served_resources_server(
    served_backoffice: str, tmp_path: Path, prefect_api: str
) -> None:
    """resources_url: the run's sessions live in the served process; same verdicts as local."""
    config = tmp_path / "remote.yaml"
    config.write_text(
        f"benchmark: backoffice\nlimit: 6\nrepeats: 2\nout: runs/remote\n"
        f"resources_url: {served_backoffice}\nresources_key_env: {KEY_VAR}\n"
    )
    checked = gym("env", "validate", str(config), cwd=tmp_path, env={KEY_VAR: KEY})
    assert checked.returncode == 0, checked.stdout
    assert f"resources server at {served_backoffice} answers /health" in checked.stdout

    env = {"PREFECT_API_URL": prefect_api, KEY_VAR: KEY}
    gym("eval", "run", str(config), cwd=tmp_path, env=env, check=True)
    assert httpx.get(f"{served_backoffice}/health").json()["sessions"] == 0  # all closed
    con = duckdb.connect(str(tmp_path / "runs" / "remote" / "gymflow.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT r.task_id, r.trajectory_json, v.passed, v.details_json FROM rollouts r "
        "JOIN verifications v USING (rollout_id) WHERE v.status = 'ok'"
    ).fetchall()
    assert len(rows) == 12
    env = load_environment("backoffice")
    tasks = {t.task_id: t for t in env.tasks("test")}
    server = env.resources_server()
    for task_id, trajectory, passed, details in rows:
        # judged in-process from the replayed calls, the verdict is the served one
        state = play(
            tasks[task_id].data["initial_state"],
            executed_calls(json.loads(trajectory)),
            strict=True,
        )
        local = server.verify_sync(VerifyInput(tasks[task_id], "", [], state))
        assert local.passed == passed and local.details == json.loads(details)


def test_a_served_server_that_does_not_fit_the_run_is_refused(
    served_backoffice: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    other = tmp_path / "other.yaml"
    other.write_text(
        f"benchmark: arithmetic-smoke\nresources_url: {served_backoffice}\n"
        f"resources_key_env: {KEY_VAR}\n"
    )
    report = validate_config(other)
    assert report.problems == [
        f"resources_url: {served_backoffice} serves environment 'backoffice', not 'arithmetic'"
    ]
    params = tmp_path / "params.yaml"
    params.write_text(
        f"benchmark: backoffice\nresources_url: {served_backoffice}\n"
        f"resources_key_env: {KEY_VAR}\nverifier_params: {{ignore: []}}\n"
    )
    (problem,) = validate_config(params).problems
    assert "verifies with state_match@" in problem and "the run with state_match@" in problem
    dead = tmp_path / "dead.yaml"
    dead.write_text(f"benchmark: backoffice\nresources_url: http://127.0.0.1:{free_port()}\n")
    (problem,) = validate_config(dead).problems
    assert "does not answer /health" in problem


def test_serve_unknown_environment_fails(tmp_path: Path) -> None:
    result = subprocess.run(
        [GYM, "serve", "environment", "nope", "--port", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "unknown environment 'nope'" in result.stderr
