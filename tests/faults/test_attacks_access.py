"""`gym serve environment` took any local caller: session ids were unguessable and bound to the
caller that seeded them, but the session cap was shared by every caller, so anyone could seed
10,000 sessions in 4 s and lock every run out for the 30 minutes a session may idle. Now every
route but /health needs the server's access key (a variable named with --key-env, or a random
key written 0600 to a file whose path it prints, never the key); a run sends it from the
variable its config's `resources_key_env` names. Without it, or with another: a 401 with a JSON
body, and nothing created; a run told so before any rollout, naming the config field."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pytest

from gymflow.core.config import EvalConfig
from gymflow.core.protocols import SESSION_TOKEN_HEADER, ResourcesUnavailable
from gymflow.environments.remote import RemoteResourcesServer
from gymflow.rollouts.plan import resolve
from gymflow.simulated.local_server import free_port
from tests.conftest import GYM, gym

CAP = 30
KEY_VAR = "GYMFLOW_TEST_RESOURCES_KEY"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, str, str]]:
    """`gym serve environment backoffice` with no --key-env: (URL, key, what it printed)."""
    state = tmp_path_factory.mktemp("state")
    port = free_port()
    process = subprocess.Popen(
        [GYM, "serve", "environment", "backoffice", "--port", str(port),
         "--max-sessions", str(CAP)],
        cwd=state,
        env={**os.environ, "XDG_STATE_HOME": str(state), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        printed = ""
        deadline = time.monotonic() + 90
        while "access key" not in printed:
            assert process.poll() is None and time.monotonic() < deadline, printed
            printed += process.stdout.readline()
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        (path,) = re.findall(r"written to (\S+) \(mode 0600\)", printed)
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
        key = Path(path).read_text().strip()
        assert len(key) >= 32 and key not in printed
        yield url, key, printed
    finally:
        process.terminate()
        process.wait(timeout=10)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _sessions(url: str) -> int:
    return httpx.get(f"{url}/health", timeout=10).json()["sessions"]


SEED = {"task_id": "backoffice-00007"}


def test_no_key_or_another_key_is_a_401_and_creates_nothing(served) -> None:
    url, key, _ = served
    with httpx.Client(base_url=url, timeout=30) as client:
        seeded = client.post("/seed_session", json=SEED, headers=_bearer(key)).json()
        sid, token = seeded["session_id"], seeded["session_token"]
        routes = [
            ("/seed_session", SEED),
            ("/tools/cancel_order", {"session_id": sid, "arguments": {"order_id": "O-1"}}),
            ("/verify", {"session_id": sid, "output_text": "", "close": True}),
            ("/close_session", {"session_id": sid}),
            ("/seed_session", "not json at all"),
        ]
        for headers in ({}, _bearer("x" * 43), _bearer(key[:-1]), {"Authorization": key}):
            for path, body in routes:
                answer = client.post(
                    path, json=body, headers={SESSION_TOKEN_HEADER: token, **headers}
                )
                assert answer.status_code == 401, (path, answer.text)
                assert answer.headers["content-type"] == "application/json"
                assert "access key" in answer.json()["detail"] and key not in answer.text
            assert _sessions(url) == 1  # nothing seeded, the run's session untouched
            health = client.get("/health", headers=headers).json()
            assert health["key_required"] is True and health["key_accepted"] is False
            assert key not in str(health)
        assert client.get("/health", headers=_bearer(key)).json()["key_accepted"] is True
        closed = client.post(
            "/close_session",
            json={"session_id": sid},
            headers={SESSION_TOKEN_HEADER: token, **_bearer(key)},
        )
        assert closed.status_code == 200 and _sessions(url) == 0


def test_filling_the_session_cap_needs_the_key(served) -> None:
    url, key, _ = served
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(CAP + 10):
            assert client.post("/seed_session", json=SEED).status_code == 401
        assert _sessions(url) == 0
        opened = [client.post("/seed_session", json=SEED, headers=_bearer(key)) for _ in range(CAP)]
        assert [o.status_code for o in opened] == [200] * CAP
        full = client.post("/seed_session", json=SEED, headers=_bearer(key))
        assert full.status_code == 503 and "sessions open" in full.json()["detail"]
        for seeded in (o.json() for o in opened):
            client.post(
                "/close_session",
                json={"session_id": seeded["session_id"]},
                headers={SESSION_TOKEN_HEADER: seeded["session_token"], **_bearer(key)},
            ).raise_for_status()
    assert _sessions(url) == 0


def _config(tmp_path: Path, url: str, name: str, key_env: str | None) -> Path:
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"benchmark: backoffice\nlimit: 6\nrepeats: 2\nout: runs/{name}\nresources_url: {url}\n"
        + (f"resources_key_env: {key_env}\n" if key_env else "")
    )
    return config


def _verdicts(run: Path) -> list[tuple]:
    if not (run / "gymflow.duckdb").exists():
        return []
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        return con.execute("SELECT status, reward FROM verifications").fetchall()
    finally:
        con.close()


def test_a_run_with_the_key_works_and_one_without_is_told_which_field(
    served, tmp_path: Path, prefect_api: str
) -> None:
    url, key, _ = served
    env = {"PREFECT_API_URL": prefect_api, KEY_VAR: key}
    ran = gym("eval", "run", str(_config(tmp_path, url, "keyed", KEY_VAR)), cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    verdicts = _verdicts(tmp_path / "runs" / "keyed")
    assert len(verdicts) == 12 and {status for status, _ in verdicts} == {"ok"}
    assert _sessions(url) == 0
    stored = (tmp_path / "runs" / "keyed" / "gymflow.duckdb").read_bytes()
    assert key.encode() not in stored
    assert key not in ran.stdout + ran.stderr

    cases = {
        "nokey": (None, env, "the config names no variable"),
        "unset": (KEY_VAR, {"PREFECT_API_URL": prefect_api, KEY_VAR: ""}, "is not set here"),
        "wrong": (KEY_VAR, {**env, KEY_VAR: "w" * 43}, "refused the access key in"),
    }
    for name, (key_env, run_env, said) in cases.items():
        config = _config(tmp_path, url, name, key_env)
        checked = gym("env", "validate", str(config), cwd=tmp_path, env=run_env)
        refused = gym("eval", "run", str(config), cwd=tmp_path, env=run_env)
        for done in (checked, refused):
            text = " ".join((done.stdout + done.stderr).split())
            assert done.returncode == 1, text
            assert "resources_key_env" in text and said in text and "Traceback" not in text
            assert key not in text
        assert _verdicts(tmp_path / "runs" / name) == []  # never a reward of 0
    assert _sessions(url) == 0


def test_a_key_refused_mid_run_is_the_server_unavailable_not_a_reward(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restarted without --key-env has a new key: the run's next request is refused.
    That is the resources server unavailable (resumable, counted toward stopping the run),
    with the field to fix, never a verdict."""
    url, _, _ = served
    monkeypatch.setenv(KEY_VAR, "r" * 43)
    plan = resolve(EvalConfig(benchmark="backoffice", resources_url=url, resources_key_env=KEY_VAR))
    remote = RemoteResourcesServer(url, plan)

    async def seed() -> None:
        try:
            await remote.seed_session(plan.all_tasks[0])
        finally:
            await remote.aclose()

    with pytest.raises(ResourcesUnavailable, match=r"resources_key_env: .* refused the access key"):
        asyncio.run(seed())
    assert _sessions(url) == 0
