"""Served endpoints that took any caller at its word. `gym serve environment` handed out session
ids `s0, s1, ...` and checked no caller: another local user drove a run's session (cancelled
its order) and the run's /verify gave 1.0. `gym serve model` read bodies by repeated
concatenation with no bound (100 MB: 59 s) and answered non-object JSON with a 500 and a
traceback. `gym serve reports` served a `.html` symlink to the run's `gymflow.duckdb`, and a
`%00` in a path was a 500."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gymflow.core.protocols import SESSION_TOKEN_HEADER
from gymflow.environments.asgi import MAX_BODY_BYTES as ENV_MAX_BODY_BYTES
from gymflow.environments.asgi import create_app
from gymflow.environments.registry import load_environment
from gymflow.reports.serving import _open_served
from gymflow.simulated.local_server import free_port
from gymflow.simulated.policy_server import MAX_BODY_BYTES
from tests.conftest import GYM


def test_a_session_answers_only_the_caller_that_seeded_it() -> None:
    """The attacker knows the session's id (a log, a guess) but not its token: every tool call,
    verify and close is an unknown session, and the session's state is as the run left it."""
    env = load_environment("backoffice")
    server = env.resources_server()
    task = next(t for t in env.tasks() if "cancel_order" in t.reference or t.data)

    async def scenario() -> tuple[dict, dict, dict]:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
            seeded = (await client.post("/seed_session", json={"task_id": task.task_id})).json()
            sid = seeded["session_id"]
            assert len(sid) >= 20 and not sid.startswith("s0")
            (internal,) = server._sessions
            before = server.final_state(internal)
            order = next(iter(before.get("orders", {})), "O-1")
            attacks = [
                ("/tools/cancel_order", {"session_id": sid, "arguments": {"order_id": order}}),
                ("/verify", {"session_id": sid, "output_text": task.reference, "close": False}),
                ("/close_session", {"session_id": sid}),
                ("/tools/cancel_order", {"session_id": "s0", "arguments": {"order_id": order}}),
            ]
            for token in (None, "guess", seeded["session_token"][:-1] + "x"):
                headers = {SESSION_TOKEN_HEADER: token} if token else None
                for path, body in attacks:
                    refused = await client.post(path, json=body, headers=headers)
                    assert refused.status_code == 404, (path, refused.text)
            after = server.final_state(internal)
            health = (await client.get("/health")).json()
            return before, after, health

    before, after, health = asyncio.run(scenario())
    assert after == before
    assert health["sessions"] == 1  # still the run's, open


#: A served environment's access key (tests/faults/test_attacks_access.py tests the key itself).
KEY_VAR, KEY = "GYMFLOW_TEST_RESOURCES_KEY", "k" * 32
AUTH = {"Authorization": f"Bearer {KEY}"}


@contextlib.contextmanager
def served(*args: str, cwd: Path) -> Iterator[str]:
    port = free_port()
    keyed = ("--key-env", KEY_VAR) if args[0] == "environment" else ()
    process = subprocess.Popen(
        [GYM, "serve", *args, *keyed, "--port", str(port)],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", KEY_VAR: KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.communicate()
            try:
                httpx.get(base + "/", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
        assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_the_model_server_checks_a_body_before_it_uses_it(tmp_path: Path, path: str) -> None:
    with served("model", cwd=tmp_path) as base:
        field = "messages" if "chat" in path else "input"
        shapes = [b"[1, 2]", b'"text"', b"5", b"null", b"{"]
        shapes += [f'{{"{field}": {value}}}'.encode() for value in ("5", "[5]", "[[1]]")]
        for body in shapes:
            answer = httpx.post(base + path, content=body, timeout=30)
            assert answer.status_code == 400, (body, answer.text)
            assert "error" in answer.json()
        faults = httpx.post(base + "/_gymflow/faults", content=b"[]", timeout=30)
        assert faults.status_code == 400
        assert _declared_too_big(base, path).startswith(b"HTTP/1.1 413")
        streamed = httpx.post(
            base + path, content=(b"x" * (1 << 20) for _ in range(66)), timeout=60
        )  # no Content-Length: counted as it is read
        assert streamed.status_code == 413
        assert httpx.get(base + "/health", timeout=30).json()["status"] == "ok"


def _declared_too_big(base: str, path: str, bound: int = MAX_BODY_BYTES, head: str = "") -> bytes:
    """A request declaring a body over the bound: answered before the body is sent."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"{head}Content-Length: {bound + 1}\r\n\r\n".encode()
        )
        return conn.recv(4096)


def test_the_report_server_serves_regular_files_under_its_root_only(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = root / "nightly"
    run.mkdir(parents=True)
    (run / "report.html").write_text("<!doctype html><title>the report</title>")
    (run / "gymflow.duckdb").write_bytes(b"DUCK the store")
    (run / "store.html").symlink_to(run / "gymflow.duckdb")
    (root / "linked").symlink_to(run, target_is_directory=True)
    (root / "everything").symlink_to("/", target_is_directory=True)  # never walked
    os.mkfifo(run / "fifo.html")
    before = {
        p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "fifo.html"
    }
    with served("reports", "--root", str(root), cwd=tmp_path) as base:
        assert httpx.get(base + "/nightly/report.html").status_code == 200
        for path in ("/nightly/store.html", "/linked/report.html", "/nightly/fifo.html",
                     "/nightly/report.html%00", "/nightly/%00.html", "/nightly/gymflow.duckdb",
                     "/nightly/../../etc/passwd.html"):  # fmt: skip
            answer = httpx.get(base + path, timeout=30)
            assert answer.status_code == 404, (path, answer.status_code)
            assert b"DUCK" not in answer.content
        index = httpx.get(base + "/").text
        assert "report.html" in index and "store.html" not in index
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.name != "fifo.html"}
    assert after == before


def test_the_environment_server_bounds_a_body_before_it_reads_it(tmp_path: Path) -> None:
    """Unbounded, a 400 MB /verify for a session that does not exist was read whole first (the
    server grew by 430 MB and kept it). Over the bound is a 413, declared or streamed, and the
    server's sessions are as they were; a run's ordinary requests still work."""
    with served("environment", "arithmetic", cwd=tmp_path) as base:
        seeded = httpx.post(
            base + "/seed_session", json={"task_id": "arith-00000"}, headers=AUTH
        ).json()
        before = httpx.get(base + "/health", timeout=30).json()
        for head, status in (("", b"401"), (f"Authorization: Bearer {KEY}\r\n", b"413")):
            answer = _declared_too_big(base, "/verify", ENV_MAX_BODY_BYTES, head)
            assert answer.startswith(b"HTTP/1.1 " + status), answer
        over = (b"x" * (1 << 20) for _ in range((ENV_MAX_BODY_BYTES >> 20) + 2))
        streamed = httpx.post(base + "/verify", content=over, headers=AUTH, timeout=60)
        assert streamed.status_code == 413, streamed.text  # no Content-Length: counted as read
        assert httpx.get(base + "/health", timeout=30).json() == before
        headers = {SESSION_TOKEN_HEADER: seeded["session_token"], **AUTH}
        body = {"session_id": seeded["session_id"], "output_text": "Answer: 0"}
        verdict = httpx.post(base + "/verify", json=body, headers=headers, timeout=30)
        assert verdict.status_code == 200, verdict.text
        assert verdict.json()["status"] == "ok"


def test_the_report_server_serves_the_file_it_opened_not_a_path_checked_before(
    tmp_path: Path,
) -> None:
    """A writer inside the root swaps `report.html` for a symlink to the run's store, back and
    forth, while it is fetched. A server that checks the path and then serves it by path can
    serve the store between the two; one that opens the file folder by folder without following
    links and serves that open file answers the report or 404, never the store."""
    run = tmp_path / "runs" / "nightly"
    run.mkdir(parents=True)
    report = run / "report.html"
    report.write_text("<!doctype html><title>the report</title>")
    (run / "gymflow.duckdb").write_bytes(b"DUCK the store " * 1000)
    before = (run / "gymflow.duckdb").read_bytes()
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            (run / "link.tmp").symlink_to(run / "gymflow.duckdb")
            os.replace(run / "link.tmp", report)
            (run / "file.tmp").write_text("<!doctype html><title>the report</title>")
            os.replace(run / "file.tmp", report)

    with served("reports", "--root", str(run.parent), cwd=tmp_path) as base:
        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            answers = [httpx.get(base + "/nightly/report.html", timeout=30) for _ in range(300)]
        finally:
            stop.set()
            swapper.join()
    assert {a.status_code for a in answers} <= {200, 404}
    assert not [a for a in answers if b"DUCK" in a.content]
    assert any(a.status_code == 200 for a in answers)
    report_text = "<!doctype html><title>the report</title>"
    assert all(a.text == report_text for a in answers if a.is_success)
    assert (run / "gymflow.duckdb").read_bytes() == before


def test_a_report_opened_for_serving_stays_the_file_opened(tmp_path: Path) -> None:
    """The same race made certain: the file is swapped for a symlink to the store after it was
    opened for serving and before a byte of it is sent."""
    (tmp_path / "report.html").write_text("the report")
    (tmp_path / "gymflow.duckdb").write_bytes(b"DUCK")
    served = _open_served(tmp_path, "report.html")
    assert served is not None
    (tmp_path / "link").symlink_to(tmp_path / "gymflow.duckdb")
    os.replace(tmp_path / "link", tmp_path / "report.html")
    with served.file:
        assert served.file.read() == b"the report"
    assert _open_served(tmp_path, "report.html") is None  # a symlink now


def test_seeded_sessions_are_capped_and_idle_ones_expire() -> None:
    """Any caller could seed sessions without end: each kept its state until the server's memory
    ran out. Past the cap a seed is a 503 saying why, while the sessions already open keep
    working; a session untouched for the idle time is closed and its state freed."""
    env = load_environment("backoffice")
    server = env.resources_server()
    task = next(iter(env.tasks()))
    now = [0.0]

    async def scenario() -> None:
        app = create_app(server, max_sessions=40, session_idle_s=600, clock=lambda: now[0])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
            seeds = [
                (await client.post("/seed_session", json={"task_id": task.task_id})).json()
                for _ in range(40)
            ]
            states = {sid: server.final_state(sid) for sid in server._sessions}
            for _ in range(200):  # the attacker keeps seeding
                refused = await client.post("/seed_session", json={"task_id": task.task_id})
                assert refused.status_code == 503, refused.text
                assert "40 sessions open" in refused.json()["detail"]
                assert refused.headers["retry-after"]
            assert len(server._sessions) == 40
            assert {sid: server.final_state(sid) for sid in server._sessions} == states
            now[0] = 599.0  # one session used just before the others go idle
            kept = seeds[0]
            headers = {SESSION_TOKEN_HEADER: kept["session_token"]}
            body = {"session_id": kept["session_id"], "output_text": "", "close": False}
            assert (await client.post("/verify", json=body, headers=headers)).status_code == 200
            now[0] = 601.0
            health = (await client.get("/health")).json()
            assert health["sessions"] == 1 and health["max_sessions"] == 40
            assert len(server._sessions) == 1  # the expired sessions' state is freed
            stale = seeds[1]
            headers_stale = {SESSION_TOKEN_HEADER: stale["session_token"]}
            gone = await client.post(
                "/verify", json={"session_id": stale["session_id"]}, headers=headers_stale
            )
            assert gone.status_code == 404
            again = await client.post("/seed_session", json={"task_id": task.task_id})
            assert again.status_code == 200
            assert (await client.post("/verify", json=body, headers=headers)).status_code == 200

    asyncio.run(scenario())


SEED = {"task_id": "arith-00000"}


def test_the_served_environment_takes_its_session_bounds_from_the_command_line(
    tmp_path: Path,
) -> None:
    with served("environment", "arithmetic", "--max-sessions", "3", cwd=tmp_path) as base:
        for _ in range(3):
            seeded = httpx.post(base + "/seed_session", json=SEED, headers=AUTH)
            assert seeded.status_code == 200
        full = httpx.post(base + "/seed_session", json=SEED, headers=AUTH)
        assert full.status_code == 503 and "3 sessions open" in full.json()["detail"]
        health = httpx.get(base + "/health", timeout=30).json()
        assert (health["sessions"], health["max_sessions"]) == (3, 3)


def test_the_report_server_serves_a_report_s_trajectories_only(tmp_path: Path) -> None:
    """It served any `.jsonl` under its root, a held-out dataset included (issue 42). Now only
    `NAME.trajectories.jsonl` beside its report `NAME.html` is served."""
    run = tmp_path / "runs" / "nightly"
    run.mkdir(parents=True)
    (run / "report.html").write_text("<!doctype html><title>the report</title>")
    (run / "report.trajectories.jsonl").write_text('{"rollout_id": "r1"}\n')
    (run / "heldout.jsonl").write_text('{"answer": "SECRET"}\n')
    (run / "orphan.trajectories.jsonl").write_text('{"answer": "SECRET"}\n')
    with served("reports", "--root", str(tmp_path / "runs"), cwd=tmp_path) as base:
        ok = httpx.get(base + "/nightly/report.trajectories.jsonl", timeout=30)
        assert ok.status_code == 200 and b"r1" in ok.content
        for path in ("/nightly/heldout.jsonl", "/nightly/orphan.trajectories.jsonl"):
            answer = httpx.get(base + path, timeout=30)
            assert answer.status_code == 404 and b"SECRET" not in answer.content, path
