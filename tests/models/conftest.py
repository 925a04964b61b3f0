"""Model-boundary fixtures: the `ledger` tool environment's policy table, and `gym serve model`
started as a subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from gymflow.core.config import HarnessConfig, ModelConfig, Sampling
from gymflow.core.prompts import render_prompt
from gymflow.core.records import Verification
from gymflow.environments.base import Environment
from gymflow.environments.registry import load_environment
from gymflow.harness import Episode, get_harness
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import user_message
from gymflow.simulated.local_server import free_port
from gymflow.simulated.policy import PolicyEntry, build_table
from tests.conftest import GYM

ENVS = Path(__file__).resolve().parents[1] / "harness" / "envs"


@asynccontextmanager
async def responses_endpoint(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    path: str = "/v1/responses",
) -> AsyncIterator[str]:
    """Serve `handler` as POST `path` on a free 127.0.0.1 port; yield the base URL (…/v1)."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    finally:
        await runner.cleanup()


#: The variable the secret-handling tests put their key in.
SECRET_ENV = "GYMFLOW_SECRET_FOR_TEST"


def one_call(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], **config: Any
) -> CallOutcome:
    """One `create` of a client keyed by SECRET_ENV against `handler`, no retries (60 s bound)."""

    async def call() -> CallOutcome:
        async with responses_endpoint(handler) as base_url:
            model = ModelConfig(
                kind="responses", base_url=base_url, api_key_env=SECRET_ENV, max_retries=0, **config
            )
            async with ResponsesClient(model, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    return asyncio.run(asyncio.wait_for(call(), timeout=60))


@pytest.fixture(scope="session")
def ledger() -> Environment:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(ENVS))
        return load_environment("ledger")


def ledger_prompts(env: Environment) -> list[str]:
    return [render_prompt(env.manifest.prompt_template, t.inputs) for t in env.tasks()]


async def play_ledger(
    env: Environment, base_url: str, *, seed: int, concurrency: int, config: ModelConfig
) -> list[tuple[Episode, Verification]]:
    """Every ledger task through `tool_loop` against `base_url`, in order, with its verdict."""
    server = env.resources_server()
    results = []
    async with ResponsesClient(config, base_url, Sampling(), concurrency=concurrency) as client:
        for task, prompt in zip(env.tasks(), ledger_prompts(env), strict=True):
            session = await server.seed_session(task)
            episode = await get_harness("tool_loop")(
                client=client,
                server=server,
                session_id=session,
                task=task,
                prompt=prompt,
                seed=seed,
                config=HarnessConfig(),
            )
            verdict = await server.verify(session, task, episode.output_text, episode.trajectory)
            results.append((episode, verdict))
    return results


@pytest.fixture(scope="session")
def ledger_table(ledger: Environment) -> dict[str, PolicyEntry]:
    return build_table(ledger.tasks(), ledger_prompts(ledger), skill_seed=0)


@pytest.fixture(scope="module")
def served_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`gym serve model --environment ledger` as a user starts it; yields http://127.0.0.1:P."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)}
    command = [GYM, "serve", "model", "--environment", "ledger", "--port", str(port)]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"gym serve model exited:\n{log.read_text()}")
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no answer:\n{log.read_text()}") from None
                time.sleep(0.1)
        assert "a simulation" in log.read_text()
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)
