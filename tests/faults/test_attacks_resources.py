"""A served resources server (`resources_url`) that stops answering mid-run. Every rollout after
it was a `harness_error` (or a `tool_error`), kinds `--resume` does not run again, so once the
server was back the run could only be started over; a rollout whose verification failed was even
stored as completed. They are now `resources_unavailable` failures, and `--resume` runs them."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import uvicorn

from gymflow.environments.asgi import create_app
from gymflow.environments.registry import load_environment
from tests.conftest import free_port, gym

TASKS = 8
HEALTHY_SEEDS = 3


class Outage:
    """ASGI middleware: after `healthy_seeds` sessions, every route but /health answers 503 (a
    server restarting behind its load balancer) until `restore()`."""

    def __init__(self, app, healthy_seeds: int) -> None:
        self.app, self.left, self.down = app, healthy_seeds, False

    def restore(self) -> None:
        self.down, self.left = False, 10**6

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            if scope["path"] == "/seed_session":
                self.left -= 1
                self.down = self.down or self.left < 0
            if self.down:
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b"restarting"})
                return
        await self.app(scope, receive, send)


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """`app` (the backoffice resources server behind a middleware) on 127.0.0.1: its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def backoffice_app():
    return create_app(load_environment("backoffice").resources_server())


@pytest.fixture
def flaky_backoffice() -> Iterator[tuple[str, Outage]]:
    outage = Outage(backoffice_app(), HEALTHY_SEEDS)
    with serving(outage) as url:
        yield url, outage


def _rollouts(run: Path) -> list[tuple]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        return con.execute(
            "SELECT r.status, r.failure_kind, v.status FROM rollouts r "
            "LEFT JOIN verifications v USING (rollout_id) ORDER BY r.task_id"
        ).fetchall()
    finally:
        con.close()


def test_a_resources_server_outage_is_resumable(
    flaky_backoffice: tuple[str, Outage], tmp_path: Path, prefect_api: str
) -> None:
    url, outage = flaky_backoffice
    config = tmp_path / "remote.yaml"
    config.write_text(
        f"benchmark: backoffice\nlimit: {TASKS}\nrepeats: 1\nconcurrency: 2\nout: run\n"
        f"resources_url: {url}\n"
    )
    env = {"PREFECT_API_URL": prefect_api}
    first = gym("eval", "run", str(config), cwd=tmp_path, env=env)
    assert first.returncode != 0, first.stdout + first.stderr
    stored = _rollouts(tmp_path / "run")
    assert len(stored) == TASKS
    failed = [row for row in stored if row[0] == "failed"]
    assert failed and {kind for _, kind, _ in failed} == {"resources_unavailable"}, stored
    # no rollout is completed without its verification
    assert all(verdict == "ok" for status, _, verdict in stored if status == "completed")

    outage.restore()  # the server is back
    resumed = gym("eval", "run", str(config), "--resume", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _rollouts(tmp_path / "run") == [("completed", None, "ok")] * TASKS


def test_a_resources_server_that_stays_down_stops_the_run_early(
    flaky_backoffice: tuple[str, Outage], tmp_path: Path, prefect_api: str
) -> None:
    """As for a dead model server: rollout after rollout failing to reach it stops the run
    (each would otherwise wait out its connect timeout when the host is gone), resumably."""
    url, outage = flaky_backoffice
    tasks = 40
    config = tmp_path / "remote.yaml"
    config.write_text(
        f"benchmark: backoffice\nlimit: {tasks}\nrepeats: 1\nconcurrency: 1\nout: run\n"
        f"resources_url: {url}\nstop_after_transport_failures: 3\n"
    )
    env = {"PREFECT_API_URL": prefect_api}
    stopped = gym("eval", "run", str(config), cwd=tmp_path, env=env)
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr  # exit_codes.RUNTIME
    said = " ".join(stopped.stderr.split())
    assert "resources server is unreachable: 3 rollouts in a row" in said and "--resume" in said
    stored = _rollouts(tmp_path / "run")
    assert len(stored) == HEALTHY_SEEDS + 3  # the rest never started: missing, not failed

    outage.restore()
    resumed = gym("eval", "run", str(config), "--resume", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _rollouts(tmp_path / "run") == [("completed", None, "ok")] * tasks


class Forger:
    """ASGI middleware: the served environment's `/verify` answers replaced, in turn, by each
    of FORGED (a compromised or buggy resources server, or a proxy in between)."""

    def __init__(self, app) -> None:
        self.app, self.calls = app, 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != "/verify":
            await self.app(scope, receive, send)
            return
        real: list[bytes] = []

        async def keep(message) -> None:
            if message["type"] == "http.response.body":
                real.append(message.get("body", b""))

        await self.app(scope, receive, keep)
        forge = FORGED[self.calls % len(FORGED)]
        self.calls += 1
        body = forge(json.loads(b"".join(real)))
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _as(reply: dict, **changes) -> bytes:
    return json.dumps({**reply, **changes}).encode()


#: Each forged reply, and what the run must store for it: (rollout status, rollout failure kind,
#: verification status, verification failure kind, reward, passed).
FORGED = [
    lambda r: _as(r, reward=0.0, passed=True),  # a pass claimed for reward 0
    lambda r: _as(r, reward=1.0, passed=False),
    lambda r: _as(r, reward="1"),
    lambda r: _as(r, verifier_version="other_verifier@1"),
    lambda r: _as(r).replace(b'"reward": ' + json.dumps(r["reward"]).encode(), b'"reward": NaN'),
    lambda r: b"<html>502 Bad Gateway</html>",
]
STORED = sorted(
    [
        ("completed", None, "ok", None, 0.0, False),
        ("completed", None, "ok", None, 1.0, True),
        ("completed", None, "error", "bad_verify_reply", None, None),
        ("completed", None, "error", "bad_verify_reply", None, None),
        ("completed", None, "error", "bad_reward", None, None),
        ("failed", "resources_unavailable", None, None, None, None),
    ],
    key=repr,
)


def test_a_served_verdict_is_judged_on_this_side(tmp_path: Path, prefect_api: str) -> None:
    """Pass or fail is the run's environment's own threshold on the served reward, not the
    server's `passed`; a reply that is no verdict, or one made under another verifier, is a
    verifier error; a body that is no JSON is a resumable failure. Never a score."""
    app = Forger(backoffice_app())
    config = tmp_path / "remote.yaml"
    with serving(app) as url:
        config.write_text(
            f"benchmark: backoffice\nlimit: {len(FORGED)}\nrepeats: 1\nconcurrency: 1\nout: run\n"
            f"resources_url: {url}\n"
        )
        run = gym("eval", "run", str(config), cwd=tmp_path, env={"PREFECT_API_URL": prefect_api})
    assert app.calls == len(FORGED), run.stdout + run.stderr
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        stored = con.execute(
            "SELECT r.status, r.failure_kind, v.status, v.failure_kind, v.reward, v.passed "
            "FROM rollouts r LEFT JOIN verifications v USING (rollout_id)"
        ).fetchall()
    finally:
        con.close()
    assert sorted(stored, key=repr) == STORED, run.stdout + run.stderr
    assert "unhealthy" in run.stdout, run.stdout
