"""Latency-bound runs as a user runs them: rollouts/s at a fixed model latency against the bound
concurrency / latency.

With a real model, a run waits on the model: at concurrency C and latency L its bound is C / L
rollouts/s. This measures the path a user takes, each part in its own process, started as a
shell would start it (soft open-file limit `--nofile`, 1,024 on many systems):

1. `gym serve model --benchmark B --latency-ms L` (the local policy server, answering every
   request after L ms);
2. a local Prefect server (`gym server --start` in a private PREFECT_HOME; an explicit
   PREFECT_API_URL is used instead, as `gym` itself does);
3. `gym eval run CONFIG` with `model: {kind: responses, base_url: ...}` and `concurrency: C`.

The figure is the collection rate (rollouts stored ÷ time from the first rollout's start to the
last one's end), beside the bound, with what the served model saw: its peak and mean requests in
flight over that span (mean in flight ÷ C is the share of the bound the client kept busy). One
continuous collector in this process against the same served model (`run_collect` over every
key at once: no batches, no Prefect, no CLI) is the reference without the run's machinery, and a
bare aiohttp client sending as many requests at the same concurrency (nothing done with the
answers but parsing them) is the ceiling of one Python process at that latency, measured in the
same minutes: on a loaded machine it falls short of the bound too.

    python bench/latency_bound.py [--rollouts 20480] [--concurrency 1024] [--latency-ms 1000]
                                  [--nofile 1024] [--batch-size N] [--skip-collector]
                                  [--skip-aiohttp]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import tiny  # noqa: E402  (bench/tiny.py: the --tiny flag every script takes)
from e2e_rollouts import BENCHMARK, GYM, write_benchmark  # noqa: E402

#: Reused across runs, so a run pays no first-time migrations; apart from other benches' homes,
#: since the local server it starts is recorded there.
PREFECT_HOME = Path.home() / ".cache" / "gymflow-bench" / "latency-prefect-home"


def limited(nofile: int):
    """A preexec_fn giving the child the soft open-file limit a user's shell would."""

    def apply() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))

    return apply


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


@contextlib.contextmanager
def served_model(env: dict, latency_ms: float, nofile: int) -> Iterator[tuple[str, int]]:
    """`gym serve model` in its own process; yields its base URL and pid."""
    port = free_port()
    command = [GYM, "serve", "model", "--benchmark", BENCHMARK, "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--latency-ms", str(latency_ms)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limited(nofile),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                get_json(f"{base}/health")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"gym serve model did not start:\n{server.stderr.read().decode()}")
                time.sleep(0.2)
        yield base, server.pid
    finally:
        server.terminate()
        server.wait(30)


@contextlib.contextmanager
def prefect_server(env: dict, nofile: int) -> Iterator[dict]:
    """The environment `gym` commands run in: an explicit PREFECT_API_URL as given, else the
    local server `gym server --start` starts in PREFECT_HOME (stopped after)."""
    if env.get("PREFECT_API_URL"):
        yield env
        return
    PREFECT_HOME.mkdir(parents=True, exist_ok=True)
    env = {**env, "PREFECT_HOME": str(PREFECT_HOME)}
    started = subprocess.run(
        [GYM, "server", "--start"], env=env, capture_output=True, preexec_fn=limited(nofile)
    )
    if started.returncode != 0:
        sys.exit(f"gym server --start failed:\n{started.stdout.decode()}{started.stderr.decode()}")
    try:
        yield env
    finally:
        subprocess.run([GYM, "server", "--stop"], env=env, capture_output=True)


def collection_rate(run_dir: Path) -> dict:
    """Rollouts stored, rollouts/s between the first start and the last finish, that span, the
    model calls that were attempts after a first (a reset connection, a refused one), and the
    longest time no rollout started (a batch's tail and the next batch's start)."""
    from gymflow.store.db import connect

    with connect(run_dir, read_only=True) as con:
        count, span, retried, gap = con.execute(
            """
            SELECT count(*), epoch(max(finished_at)) - epoch(min(started_at)),
                   (SELECT count(*) FROM model_calls WHERE attempt > 0),
                   (SELECT max(epoch(started_at) - epoch(previous)) FROM (
                        SELECT started_at, lag(started_at) OVER (ORDER BY started_at) AS previous
                        FROM rollouts))
            FROM rollouts
            """
        ).fetchone()
    return {
        "rollouts": count,
        "rate": count / span,
        "span": span,
        "retried": retried,
        "gap": gap or 0.0,
    }


def cpu_of(pid: int) -> float:
    """CPU seconds (user + sys) process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Served:
    """What the served model saw of one measure: its requests in flight (its own stats) and its
    CPU seconds, read before and after."""

    def __init__(self, base: str, pid: int) -> None:
        self.base, self.pid = base, pid
        self.before = get_json(f"{base}/_gymflow/stats")
        self.cpu = cpu_of(pid)

    def over(self, figure: dict) -> dict:
        """`figure` with the server's peak requests in flight (since it started), its mean in
        flight over the figure's span (its integral of requests in flight: no request falls
        outside the span) and its CPU seconds."""
        after = get_json(f"{self.base}/_gymflow/stats")
        busy = after["in_flight_seconds"] - self.before["in_flight_seconds"]
        return {
            **figure,
            "peak": after["peak_in_flight"],
            "mean": busy / figure["span"],
            "server_cpu": cpu_of(self.pid) - self.cpu,
        }


def config(run_dir: Path, base: str, concurrency: int, batch_size: int | None) -> dict:
    spec = {
        "benchmark": BENCHMARK,
        "out": str(run_dir),
        "concurrency": concurrency,
        "model": {"kind": "responses", "base_url": f"{base}/v1", "name": "gymflow-local-policy"},
    }
    if batch_size:
        spec["batch_size"] = batch_size
    return spec


def run_cli(root: Path, env: dict, spec: dict, nofile: int) -> dict:
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(spec))
    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [GYM, "eval", "run", str(path)], env=env, capture_output=True, preexec_fn=limited(nofile)
    )
    wall, used = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"gym eval run failed:\n{result.stdout.decode()}\n{result.stderr.decode()}")
    client_cpu = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    return {**collection_rate(Path(spec["out"])), "wall": wall, "client_cpu": client_cpu}


def run_collector(spec: dict) -> dict:
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.store.db import connect

    plan = resolve(EvalConfig.model_validate(spec))
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    started, cpu = time.perf_counter(), time.process_time()
    run_collect(plan, plan.keys(), con, base_url=spec["model"]["base_url"])
    wall, client_cpu = time.perf_counter() - started, time.process_time() - cpu
    con.close()
    return {**collection_rate(plan.run_dir), "wall": wall, "client_cpu": client_cpu}


def run_aiohttp(base: str, requests: int, concurrency: int) -> dict:
    """A bare aiohttp client in this process against the same served model: `requests` POSTs of
    a task's prompt, `concurrency` at once, each answer read and parsed and nothing else done
    with it. What one Python process's HTTP alone keeps of the bound, in the same minutes."""
    import asyncio

    import aiohttp

    from gymflow.models.open_files import ensure_open_files

    ensure_open_files(concurrency)  # as the collector does for itself
    url = f"{base}/v1/responses"
    prompt = {"type": "message", "role": "user", "content": "Compute 6 * 7."}
    body = {"model": "gymflow-local-policy", "input": [prompt], "max_output_tokens": 256}
    starts: list[float] = []

    async def drive() -> None:
        remaining = requests
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def worker() -> None:
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    starts.append(time.perf_counter())
                    async with session.post(url, json=body) as reply:
                        reply.raise_for_status()
                        await reply.json()

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    started, cpu = time.perf_counter(), time.process_time()
    asyncio.run(drive())
    wall, client_cpu = time.perf_counter() - started, time.process_time() - cpu
    span = wall - (starts[0] - started)
    gap = max((b - a for a, b in itertools.pairwise(starts)), default=0.0)
    return {
        "rollouts": requests,
        "rate": requests / span,
        "span": span,
        "retried": 0,
        "gap": gap,
        "wall": wall,
        "client_cpu": client_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20_480)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--latency-ms", type=float, default=1000.0)
    parser.add_argument(
        "--nofile", type=int, default=1024, help="soft open-file limit of each process started"
    )
    parser.add_argument("--batch-size", type=int, help="set by hand (default: gymflow's)")
    parser.add_argument("--skip-collector", action="store_true")
    parser.add_argument(
        "--skip-aiohttp", action="store_true", help="no bare aiohttp client reference row"
    )
    args = tiny.parse(parser, rollouts=128, concurrency=64, latency_ms=200.0)
    bound = args.concurrency / (args.latency_ms / 1000)

    rows = []
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-") as tmp:
        root = Path(tmp)
        extra = os.environ.get("GYMFLOW_ENVIRONMENTS_PATH")
        os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = os.pathsep.join(
            [str(root / "envs"), *([extra] if extra else [])]
        )
        tasks, repeats = write_benchmark(root / "envs", "arithmetic", "full", args.rollouts)
        env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        with (
            served_model(env, args.latency_ms, args.nofile) as (base, pid),
            prefect_server(env, args.nofile) as cli_env,
        ):
            spec = config(root / "cli", base, args.concurrency, args.batch_size)
            served = Served(base, pid)
            figure = run_cli(root, cli_env, spec, args.nofile)
            rows.append(("gym eval run (user's path)", served.over(figure)))
            if not args.skip_collector:
                served = Served(base, pid)
                figure = run_collector(config(root / "collector", base, args.concurrency, None))
                rows.append(("one continuous collector", served.over(figure)))
            if not args.skip_aiohttp:
                served = Served(base, pid)
                figure = run_aiohttp(base, args.rollouts, args.concurrency)
                rows.append(("bare aiohttp client (requests)", served.over(figure)))

    print(
        f"latency-bound runs: arithmetic, {tasks} tasks x {repeats} repeats, concurrency "
        f"{args.concurrency}, model latency {args.latency_ms:g} ms (`gym serve model`, soft "
        f"open-file limit {args.nofile}), batch size {args.batch_size or 'default'}; "
        f"bound = concurrency / latency = {bound:,.0f} rollouts/s; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print(
        "\n| measure | rollouts | rollouts/s | ÷ bound | span s | wall s | peak in flight | "
        "mean in flight | retried calls | longest start gap s | client CPU s | "
        "served model CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, f in rows:
        print(
            f"| {name} | {f['rollouts']:,} | {f['rate']:,.0f} | {f['rate'] / bound:.2f} | "
            f"{f['span']:.1f} | {f['wall']:.1f} | {f['peak']:,} | {f['mean']:,.0f} | "
            f"{f['retried']:,} | {f['gap']:.2f} | {f['client_cpu']:.1f} | {f['server_cpu']:.1f} |"
        )


if __name__ == "__main__":
    main()
