"""Several hosts that share nothing but the Prefect API and object storage: a `prefect server`,
SeaweedFS's S3 (tests/storage.py), and two process workers, each in a mount and PID namespace
of its own with a private /tmp (a host of its own as far as files go). A 2-shard run with
`--shard-root s3://…` from the CLI; the host running one shard is SIGKILLed (every process in
its namespace) once that shard has checkpointed twice. Its shard times out, is retried on the
other host, restores the checkpoints and runs only what is missing, while a duplicate attempt
of the same shard runs beside it: of the two, one commits and the other's commit is refused.
The run ends COMPLETED with every rollout stored once, and no more model calls were repeated
than one checkpoint's worth (plus the calls in flight when the host died).

The model is gymflow's simulated policy served by `gym serve model` behind a counting proxy, so
the test counts every call any host made. Skipped where namespaces cannot be made (not root)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import aiohttp
import duckdb
import httpx
import pytest
from aiohttp import web

from gymflow.core.config import EvalConfig
from gymflow.flows.parameters import ScaleOptions, shard_config
from gymflow.rollouts.published import PublishedShard
from gymflow.store.remote import Remote
from tests.conftest import GYM, PREFECT, ROOT, free_port
from tests.flows.deployed import POOL, call_api, healthy, started, stop, wait_for

pytestmark = pytest.mark.prefect

LIMIT = 40  # tasks, x4 repeats: 160 rollouts, about 80 a shard
CONCURRENCY = 2
LATENCY_MS = 300  # a shard lasts ~12 s: long enough to die in the middle of
CHECKPOINT_S = 2.0
SHARD_TIMEOUT_S = 90  # a live shard on a loaded machine outlasted 40 s (a false timeout)


def namespaces_or_skip() -> None:
    probe = ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--", "true"]
    try:
        made = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot make mount and PID namespaces here: {exc}")
    if made.returncode != 0:
        pytest.skip(f"cannot make mount and PID namespaces here (root needed): {made.stderr}")
    for path in (ROOT, Path(sys.prefix)):
        if Path("/tmp") in path.resolve().parents:
            pytest.skip(f"{path} is under /tmp, which each host's private /tmp would hide")


class CountingProxy:
    """Forwards every request to `upstream`; counts the model calls (POST …/responses)."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.calls, self.port = upstream, 0, free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _forward(self, request: web.Request) -> web.Response:
        if request.method == "POST" and request.path.endswith("/responses"):
            self.calls += 1
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            data=await request.read(),
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as answer:
            body = await answer.read()
            return web.Response(body=body, status=answer.status, content_type=answer.content_type)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._session = aiohttp.ClientSession()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._forward)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            await self._runner.cleanup()
            await self._session.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


@contextmanager
def host(name: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A process worker in its own mount and PID namespace, /tmp a private tmpfs."""
    worker = f"{PREFECT} worker start --pool {POOL} --limit 1 --name {name}"
    command = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--mount-proc",
        "--",
        "sh",
        "-c",
        f"mount -t tmpfs tmpfs /tmp && mkdir /tmp/prefect-home && exec {worker}",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            env={**env, "PREFECT_HOME": "/tmp/prefect-home"},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield process
    finally:
        kill_host(process)


def kill_host(process: subprocess.Popen) -> None:
    """SIGKILL the namespace's first process (unshare's child, the worker): the kernel then
    kills every process in the namespace. A signal to unshare itself would not reach them."""
    if process.poll() is None:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGKILL)
    process.wait(timeout=30)


def shard_runs(api: str, run_id: str) -> list[dict]:
    """The run's shard flow runs, oldest first; none while a busy server does not answer in
    time (the callers poll)."""
    try:
        runs = call_api(
            "POST",
            f"{api}/flow_runs/filter",
            {"flows": {"name": {"any_": ["eval-shard"]}}, "sort": "EXPECTED_START_TIME_ASC"},
        )
    except httpx.TimeoutException:
        return []
    return sorted((r for r in runs if r["name"].startswith(run_id)), key=lambda r: r["created"])


def taken_by(log: Path, flow_run_id: str) -> bool:
    """The worker writing `log` runs the flow run: it submitted it and was not refused. Both
    workers try a new run, and the one that loses logs "Aborted submission of flow run" with
    its id. Read as taken, host-b's shard was taken for the one host-a's death would kill: the
    kill hit host-a's other shard, and the wait for a retry of a shard that never died failed
    when the run ended (a full run here; likely the wait that ran out in CI on 07c9d7e)."""
    said = log.read_text() if log.exists() else ""
    return (
        f"submitting flow run '{flow_run_id}'" in said
        and f"Aborted submission of flow run '{flow_run_id}'" not in said
    )


def test_a_host_killed_mid_shard_costs_one_checkpoint(s3, tmp_path, monkeypatch):
    namespaces_or_skip()
    # hosts share no files (each has its own /tmp): one seal key given to all of them, as
    # docs/advanced/security.md tells a user of several hosts, and to this process that reads
    # their manifests
    monkeypatch.setenv("GYMFLOW_SEAL_KEY", secrets.token_hex(32))
    port, model_port = free_port(), free_port()
    api = f"http://127.0.0.1:{port}/api"
    root = s3.url(tmp_path.name)
    env = {
        **os.environ,
        **s3.env,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_LOGGING_LEVEL": "INFO",
        "GYMFLOW_CHECKOUT": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    model = [GYM, "serve", "model", "--benchmark", "arithmetic-smoke", "--port", str(model_port)]
    model += ["--latency-ms", str(LATENCY_MS)]
    with ExitStack() as stack:
        server = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
        stack.enter_context(started(server, env, tmp_path / "server.log"))
        stack.enter_context(started(model, env, tmp_path / "model.log"))
        wait_for("the Prefect server", lambda: healthy(api), timeout=180)
        for command in (
            [PREFECT, "work-pool", "create", POOL, "--type", "process"],
            [PREFECT, "--no-prompt", "deploy", "-n", "eval-shard"],
        ):
            done = subprocess.run(
                command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, done.stdout + done.stderr
        upstream = f"http://127.0.0.1:{model_port}"
        proxy = stack.enter_context(CountingProxy(upstream))
        beside = stack.enter_context(CountingProxy(upstream))  # the duplicate attempt's calls
        logs = {name: tmp_path / f"{name}.log" for name in ("host-a", "host-b")}
        hosts = {name: stack.enter_context(host(name, env, log)) for name, log in logs.items()}

        config = {
            "benchmark": "arithmetic-smoke",
            "limit": LIMIT,
            "concurrency": CONCURRENCY,
            "model": {"kind": "responses", "base_url": proxy.base_url},
            "out": str(tmp_path / "run"),
        }
        (tmp_path / "eval.json").write_text(json.dumps(config))
        eval_config = EvalConfig.model_validate(config)
        run_id = eval_config.fingerprint()
        parent = subprocess.Popen(
            [
                *(GYM, "eval", "run", str(tmp_path / "eval.json"), "--shards", "2"),
                *("--work-pool", POOL, "--shard-root", root, "--shard-retries", "2"),
                *("--shard-timeout", str(SHARD_TIMEOUT_S), "--checkpoint-s", str(CHECKPOINT_S)),
            ],
            cwd=tmp_path,
            env=env,
            stdout=(tmp_path / "parent.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        stack.callback(stop, parent)

        # the shard host-a took, once it has checkpointed twice (the second a whole interval's
        # worth, the measure of what a death may cost): then host-a dies
        def checkpointed_on_a() -> dict | None:
            for run in shard_runs(api, run_id):
                if taken_by(logs["host-a"], run["id"]) and run["state_type"] == "RUNNING":
                    url = run["parameters"]["config"]["out"]
                    if len(PublishedShard(url).checkpoints()) >= 2:
                        return run
            return None

        doomed = wait_for("a checkpoint of host-a's shard", checkpointed_on_a, 240, every=0.2)
        # a worker may run both shards: each that host-a ran dies with it
        on_a = [r for r in shard_runs(api, run_id) if taken_by(logs["host-a"], r["id"])]
        kill_host(hosts["host-a"])
        dead = {
            run["parameters"]["config"]["shard"]["index"]: run
            for run in [*on_a, doomed]
            if run["state_type"] == "RUNNING"
        }
        dead_checkpoints = {
            index: PublishedShard(run["parameters"]["config"]["out"]).checkpoints()
            for index, run in dead.items()
        }

        # its retry, on host-b; a duplicate attempt starts beside it. The retry is a new flow
        # run when the parent gave up waiting on the dead one, or the same flow run run again
        # when Prefect had already marked it Crashed (`fan_out._run_or_rerun`); on a busy machine
        # it may have finished between two polls.
        def retried() -> dict | None:
            again = [
                r
                for r in shard_runs(api, run_id)
                if (died := dead.get(r["parameters"]["config"]["shard"]["index"])) is not None
                and (r["id"] != died["id"] or r["run_count"] > died["run_count"])
                and r["state_type"] in ("RUNNING", "COMPLETED")
            ]
            if not again and parent.poll() is not None:  # nothing will: say why, not wait
                raise AssertionError(
                    f"the run exited {parent.returncode} before the dead host's shard ran again: "
                    + (tmp_path / "parent.log").read_text()[-5000:]
                )
            return again[0] if again else None

        try:
            retry = wait_for(
                "the dead host's shard to run again", retried, SHARD_TIMEOUT_S + 480, every=0.5
            )
        except AssertionError as exc:
            states = [(r["name"], r["state_type"], r["run_count"]) for r in shard_runs(api, run_id)]
            said = {name: path.read_text()[-3000:] for name, path in logs.items()}
            said["parent"] = (tmp_path / "parent.log").read_text()[-5000:]
            raise AssertionError(f"{exc}; shard runs {states}; logs {said}") from None
        doomed = dead[retry["parameters"]["config"]["shard"]["index"]]
        duplicate = subprocess.run(
            [sys.executable, "-c", DUPLICATE, json.dumps(doomed["parameters"]), beside.base_url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert duplicate.returncode == 0, duplicate.stdout + duplicate.stderr
        assert parent.wait(timeout=300) == 0, (tmp_path / "parent.log").read_text()[-5000:]

        runs = call_api(
            "POST", f"{api}/flow_runs/filter", {"flows": {"name": {"any_": ["eval-run"]}}}
        )
        assert [r["state_type"] for r in runs] == ["COMPLETED"]
        # The duplicate either raced the retry to the commit and one lost, or started after the
        # retry committed and ran nothing: either way no second result exists to merge.
        refused = ("this attempt's result is refused and never merged", "already; nothing to run")
        of_retry = {"logs": {"flow_run_id": {"any_": [retry["id"]]}}, "limit": 200}
        retry_logs = call_api("POST", f"{api}/logs/filter", of_retry)
        said = duplicate.stdout + duplicate.stderr + "\n".join(e["message"] for e in retry_logs)
        assert any(line in said for line in refused), said[-5000:]
        assert "loopback" in (tmp_path / "parent.log").read_text()

    # every rollout stored once, from one committed result per shard
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        stored, distinct, expected, calls = con.execute(
            """
            SELECT (SELECT count(*) FROM rollouts),
                   (SELECT count(DISTINCT (task_id, repeat_index)) FROM rollouts),
                   (SELECT count(*) FROM tasks) * (SELECT max(repeats) FROM runs),
                   (SELECT count(*) FROM model_calls)
            """
        ).fetchone()
    finally:
        con.close()
    assert stored == distinct == expected == LIMIT * 4
    assert calls == stored  # one call a rollout, none lost or doubled
    # the collection the run planned (its shards' flow runs carry it)
    collection = doomed["parameters"]["config"]["shard"]["collection"]
    scale = ScaleOptions(shards=2, shard_root=root, collection=collection)
    for index in (0, 1):
        url = shard_config(eval_config, scale, run_id, index).out
        assert Remote(url).find("COMMITTED.json") == ["COMMITTED.json"]
    # the calls the dead host made and never checkpointed: at most one checkpoint's worth for
    # each shard it ran
    repeated = proxy.calls - stored
    checkpointed = [c.rollouts for found in dead_checkpoints.values() for c in found]
    worth = len(dead) * (max(checkpointed) + CONCURRENCY)
    print(  # the figures the docs quote (`pytest -s`)
        f"model calls {proxy.calls} for {stored} rollouts (repeated {repeated}); the dead "
        f"host's checkpoints held {checkpointed} rollouts; the "
        f"duplicate attempt made {beside.calls} calls"
    )
    assert 0 <= repeated <= worth, (proxy.calls, stored, checkpointed)


#: A duplicate attempt of a shard, as a host that lost its lease would run it: the eval-shard
#: flow with the shard's own parameters, its model calls through another proxy.
DUPLICATE = """
import json, sys
from gymflow.flows.eval_shard import eval_shard
parameters = json.loads(sys.argv[1])
print(json.dumps(eval_shard(**parameters, base_url=sys.argv[2]), default=str))
"""
