"""What the recording proxy adds to a model call: the same calls sent by the openai SDK straight
to `gym serve model` (the baseline, measured in the same run) and through a RecordingProxy in
front of it, non-streamed and streamed.

    python bench/proxy_overhead.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import tiny
from openai import AsyncOpenAI

from gymflow.core.config import ModelConfig, Sampling
from gymflow.harness.proxy import RecordingProxy
from gymflow.models.client import ResponsesClient
from gymflow.simulated.local_server import free_port

GYM = str(Path(sys.executable).parent / "gym")


async def _timed(sdk: AsyncOpenAI, calls: int, stream: bool) -> list[float]:
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        if stream:
            async with sdk.responses.stream(model="m", input="What is 2 + 2?") as running:
                await running.get_final_response()
        else:
            await sdk.responses.create(model="m", input="What is 2 + 2?")
        seconds.append(time.perf_counter() - started)
    return seconds


async def measure(base: str, calls: int) -> None:
    direct = AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
    baseline = await _timed(direct, calls, stream=False)
    config = ModelConfig(kind="responses", base_url=base, name="m", max_retries=0)
    client = ResponsesClient(config, base, Sampling())
    async with client, RecordingProxy(client) as proxy:
        sdk = AsyncOpenAI(base_url=proxy.base_url, api_key=proxy.api_key, max_retries=0)
        proxied = await _timed(sdk, calls, stream=False)
        streamed = await _timed(sdk, calls, stream=True)
    for name, seconds in (("direct", baseline), ("proxy", proxied), ("proxy, streamed", streamed)):
        print(f"{name:16} median {statistics.median(seconds) * 1000:6.2f} ms  "
              f"p95 {sorted(seconds)[int(0.95 * len(seconds))] * 1000:6.2f} ms")  # fmt: skip
    added = statistics.median(proxied) - statistics.median(baseline)
    print(f"added by the proxy: {added * 1000:.2f} ms a call (median), {len(proxy.calls)} recorded")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = tiny.parse(parser, calls=5).calls
    port = free_port()
    server = subprocess.Popen([GYM, "serve", "model", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        asyncio.run(measure(f"http://127.0.0.1:{port}/v1", calls))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
