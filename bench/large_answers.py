"""Peak RSS of the collector against a model server whose every answer is a huge (valid) body.

A server process answers each `/v1/responses` request with a Responses API object holding
`--answer-mb` MB of text; a collector process (`gymflow.rollouts.collect.run_collect`, what a
Prefect batch task runs, with `max_retries: 0`) runs `--rollouts` single-turn arithmetic rollouts
against it at `--concurrency`, writing a fresh DuckDB store. The collector's peak RSS (VmHWM,
polled) and the stored outcome are printed. The collector runs the gymflow on PYTHONPATH, so
pointing PYTHONPATH at another checkout measures that one (before / after).

    python bench/large_answers.py [--answer-mb 50] [--rollouts 4] [--concurrency 2] [--chunked]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny
from e2e_rollouts import high_water_kib  # a sibling script, not a package


def serve(port: int, answer_mb: int, chunked: bool) -> None:
    import orjson
    from aiohttp import web

    text = "x" * (answer_mb << 20)
    body = orjson.dumps(
        {
            "id": "resp_big",
            "object": "response",
            "model": "big",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
            ],
            "usage": {"input_tokens": 10, "output_tokens": answer_mb << 18},
        }
    )
    del text

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        if not chunked:
            return web.Response(body=body, content_type="application/json")
        reply = web.StreamResponse(headers={"content-type": "application/json"})
        reply.enable_chunked_encoding()
        await reply.prepare(request)
        try:
            view = memoryview(body)
            for start in range(0, len(body), 1 << 16):
                await reply.write(view[start : start + (1 << 16)])
        except (ConnectionError, RuntimeError):
            pass  # the client stopped reading
        return reply

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/v1/responses", answer)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def collect(base_url: str, out: str, rollouts: int, concurrency: int) -> None:
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.store.db import connect

    config = EvalConfig.model_validate(
        {
            "benchmark": "arithmetic-smoke",
            "limit": rollouts,
            "repeats": 1,
            "concurrency": concurrency,
            "out": out,
            "model": {"kind": "responses", "base_url": base_url, "max_retries": 0},
        }
    )
    plan = resolve(config)
    con = connect(plan.run_dir, create=True)
    register_run(con, plan, resume=False)
    run_collect(plan, plan.keys(), con, base_url=base_url)
    rows = con.execute(
        "SELECT coalesce(failure_kind, status), count(*) FROM rollouts GROUP BY ALL ORDER BY 1"
    ).fetchall()
    stored = con.execute("SELECT sum(length(response_json)) FROM model_calls").fetchone()[0]
    con.close()
    print(f"rollouts: {dict(rows)}; model_calls.response_json holds {stored or 0:,} characters")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(port: int, server: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("the large-answer server exited")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit("the large-answer server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answer-mb", type=int, default=50)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--chunked", action="store_true", help="no Content-Length")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--collect", nargs=2, metavar=("URL", "OUT"), help=argparse.SUPPRESS)
    args = tiny.parse(parser, answer_mb=2, rollouts=2)
    if args.serve:
        return serve(args.serve, args.answer_mb, args.chunked)
    if args.collect:
        return collect(*args.collect, args.rollouts, args.concurrency)

    port = free_port()
    me = [sys.executable, __file__, "--answer-mb", str(args.answer_mb)]
    server = subprocess.Popen([*me, "--serve", str(port), *(["--chunked"] * args.chunked)])
    try:
        wait_for(port, server)
        with tempfile.TemporaryDirectory(prefix="gymflow-large-") as tmp:
            url = f"http://127.0.0.1:{port}/v1"
            scale = ["--rollouts", str(args.rollouts), "--concurrency", str(args.concurrency)]
            command = [*me, *scale, "--collect", url, tmp]
            started = time.perf_counter()
            collector = subprocess.Popen(command)
            peak_kib = 0
            while collector.poll() is None:
                peak_kib = max(peak_kib, high_water_kib(collector.pid))
                time.sleep(0.05)
            seconds = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=30)
    framing = "chunked" if args.chunked else "Content-Length"
    print(
        f"collector against {args.answer_mb} MB answers ({framing}), {args.rollouts} rollouts at "
        f"concurrency {args.concurrency}: peak RSS {peak_kib / 1024:,.0f} MiB, {seconds:.1f} s, "
        f"exit {collector.returncode} (gymflow from {os.environ.get('PYTHONPATH') or 'site'})"
    )


if __name__ == "__main__":
    main()
