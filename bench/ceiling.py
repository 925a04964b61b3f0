"""Ceiling: requests/s one Python client process can send to a trivial `/v1/responses` server.

The server is a raw ASGI app under uvicorn in its own process, answering every POST with the same
small Responses API object, so the figure is the client's limit, not the server's. Three clients,
each at the same concurrency: aiohttp, httpx with its default transport, and gymflow's model
client (`ResponsesClient.create`: its own HTTP/1.1 transport, models/transport.py, plus the
Responses validation and the evidence record every call keeps); aiohttp and gymflow's client both
on the default asyncio loop and on uvloop, the loop gymflow's collector runs on. The aiohttp
figure is the yardstick: bench/e2e_rollouts.py divides its rollouts/s by it.

    python bench/ceiling.py [--seconds 5] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny
from transport import drive

CANNED = json.dumps(
    {
        "id": "resp_0",
        "object": "response",
        "created_at": 0,
        "model": "trivial",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_0",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Answer: 42", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 30, "output_tokens": 4, "total_tokens": 34},
    }
).encode()
REQUEST = {
    "model": "trivial",
    "input": [{"type": "message", "role": "user", "content": "Compute 6 * 7."}],
    "temperature": 0.7,
}


async def trivial_app(scope, receive, send) -> None:
    """Reads the whole body, answers the canned response: the cheapest honest server."""
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": CANNED})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def trivial_server() -> Iterator[str]:
    """Serve `trivial_app` in a child process; yield its base URL (…/v1)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)], stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("trivial server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def aiohttp_rate(base_url: str, seconds: float, concurrency: int) -> float:
    import aiohttp

    url = f"{base_url}/responses"
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post() -> None:
            async with session.post(url, json=REQUEST) as reply:
                reply.raise_for_status()
                await reply.json()

        return await drive(post, seconds, concurrency)


async def httpx_rate(base_url: str, seconds: float, concurrency: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def post() -> None:
            reply = await client.post(f"{base_url}/responses", json=REQUEST)
            reply.raise_for_status()
            reply.json()

        return await drive(post, seconds, concurrency)


async def gymflow_rate(base_url: str, seconds: float, concurrency: int) -> float:
    """gymflow's model client: its transport, plus validation and the evidence record."""
    from gymflow.core.config import ModelConfig, Sampling
    from gymflow.models.client import ResponsesClient

    config = ModelConfig(kind="responses", base_url=base_url, max_retries=0)
    async with ResponsesClient(config, base_url, Sampling(), concurrency=concurrency) as client:

        async def post() -> None:
            outcome = await client.create(REQUEST["input"], tools=None, call_index=0, seed=0)
            if outcome.error is not None:
                raise outcome.error

        return await drive(post, seconds, concurrency)


Client = Callable[[str, float, int], Awaitable[float]]
#: name -> (client, runs on uvloop). gymflow's collector runs on uvloop (rollouts.collect), so
#: the aiohttp ceiling is measured on both loops: the asyncio figure is the issue's yardstick, the
#: uvloop one what a bare client on gymflow's loop reaches.
CLIENTS: dict[str, tuple[Client, bool]] = {
    "aiohttp": (aiohttp_rate, False),
    "aiohttp on uvloop": (aiohttp_rate, True),
    "httpx (default transport)": (httpx_rate, False),
    "gymflow model client": (gymflow_rate, False),
    "gymflow model client on uvloop": (gymflow_rate, True),
}


def measure(
    base_url: str, *, seconds: float, concurrency: int, clients: list[str] | None = None
) -> dict[str, float]:
    """Requests/s per client, each in a fresh event loop against the same server."""
    import uvloop

    rates = {}
    for name in clients or list(CLIENTS):
        client, on_uvloop = CLIENTS[name]
        with asyncio.Runner(loop_factory=uvloop.new_event_loop if on_uvloop else None) as runner:
            rates[name] = runner.run(client(base_url, seconds, concurrency))
    return rates


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Left-align the first column, right-align the rest, widths from the content."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    for row in (headers, *rows):
        cells = [f"{row[0]:<{widths[0]}}"]
        cells += [f"{cell:>{width}}" for cell, width in zip(row[1:], widths[1:], strict=True)]
        print("  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed window per client")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = tiny.parse(parser, seconds=0.1)
    if args.serve:
        import uvicorn

        uvicorn.run(
            trivial_app,
            host="127.0.0.1",
            port=args.serve,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        return
    with trivial_server() as base_url:
        rates = measure(base_url, seconds=args.seconds, concurrency=args.concurrency)
    print(
        f"ceiling: trivial /v1/responses on 127.0.0.1, concurrency {args.concurrency}, "
        f"{args.seconds:g} s per client, {os.cpu_count()} cores (shared machine: noisy)"
    )
    print_table(
        ["client", "requests/s", "÷ aiohttp"],
        [[name, f"{rate:,.0f}", f"{rate / rates['aiohttp']:.2f}"] for name, rate in rates.items()],
    )


if __name__ == "__main__":
    main()
