"""Verifications per second for each verifier, with one worker and with one worker per core.

Each case is `(name, callable)`: the callable runs one verification (cycling through the
environment's tasks, alternating the reference and the distractor answer, so passes and failures
are both timed). A worker is a process that calls it in a loop for `--seconds`; with `--workers 2`
two such processes run at once, which is how a 2-core machine is used (pure-Python verifiers hold
the GIL, so threads would not add a core). HumanEval loads each answer in its sandbox (bubblewrap,
rlimits, its own uid) and runs the tests in the worker against it, as gymflow does. The math
judge is timed against a trivial judge server on 127.0.0.1 that answers at once: it measures
gymflow's side of a judge call, not a model.

A case's callable is a factory, called once in each worker process, that returns the
one-verification function. Other environments add rows with `main(extra=[(name, factory), ...])`.

The machine these figures come from is shared, so each row also gives verifications per
CPU-second (the worker's CPU plus the sandbox's, which the verifier reads from the kernel as the
sandbox closes: its processes, bubblewraps included, live in a PID namespace whose CPU never
reaches the worker's rusage), which load does not change.

    python bench/verifiers.py [--seconds 5] [--workers 1 2] [--only code_exec]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import tiny

Case = tuple[str, Callable[[], Any]]


def _cycler(
    environment: str,
    split: str,
    verifier_params: dict[str, Any] | None = None,
    *,
    final_state: Callable[[Any, tuple], dict[str, Any] | None] | None = None,
):
    """A callable verifying the split's tasks in turn, reference then distractor answer.
    `final_state(task, plan)` gives stateful environments the session state a plan ends in."""
    from gymflow.environments.registry import load_environment
    from gymflow.verifiers.base import VerifyInput

    env = load_environment(environment)
    server = env.resources_server(verifier_params)
    inputs = [
        VerifyInput(
            task,
            text,
            _trajectory(text, plan),
            final_state(task, plan) if final_state is not None else None,
        )
        for task in env.tasks(split)
        for text, plan in (
            (task.reference, task.reference_actions),
            (task.distractor, task.distractor_actions),
        )
    ]
    stream = itertools.cycle(inputs)

    def verify_one() -> Any:
        verification = server.verify_sync(next(stream))
        if verification.status != "ok":
            raise RuntimeError(f"{environment}: verification failed: {verification.details}")
        return verification

    return verify_one


def _trajectory(text: str, plan: tuple) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "task"}]
    for turn in plan:
        for index, call in enumerate(turn):
            arguments = json.dumps(call.arguments)
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"c{index}",
                    "name": call.name,
                    "arguments": arguments,
                }
            )
    if text:
        items.append({"type": "message", "role": "assistant", "content": text})
    return items


class _InstantJudge(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        body = json.dumps(
            {
                "id": "resp_judge",
                "object": "response",
                "model": "instant-judge",
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "Score: 1"}],
                    }
                ],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def instant_judge() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _InstantJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _judge_cycler(judge_url: str) -> Callable[[], Any]:
    """The math tasks under the math_judge verifier, always asking the judge."""
    from gymflow.environments.base import EnvironmentManifest, VerifierRef
    from gymflow.environments.registry import load_environment
    from gymflow.verifiers.base import VerifyInput

    env = load_environment("math")
    data = env.manifest.model_dump()
    data["verifier"] = VerifierRef(name="math_judge", params={})
    judged = type(env)(EnvironmentManifest.model_validate(data), env.folder)
    server = judged.resources_server({"base_url": judge_url, "verify_first": False})
    stream = itertools.cycle(
        [VerifyInput(t, text) for t in env.tasks("test") for text in (t.reference, t.distractor)]
    )
    return lambda: server.verify_sync(next(stream))


def cases(judge_url: str) -> list[Case]:
    """(name, factory) per verifier; each worker process calls the factory once."""
    return [
        ("numeric_match (arithmetic)", lambda: _cycler("arithmetic", "test")),
        ("code_exec (humaneval, sandboxed)", lambda: _cycler("humaneval", "test")),
        ("bfcl (all categories)", lambda: _cycler("bfcl", "all")),
        ("math_answer (math-verify)", lambda: _cycler("math", "test")),
        ("math_judge (instant local judge)", lambda: _judge_cycler(judge_url)),
    ]


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _worker(factory: Callable[[], Callable[[], Any]], seconds: float, start, queue) -> None:
    verify_one = factory()
    verify_one()  # warm: imports, caches, first sandbox
    start.wait()
    count, sandboxed, cpu = 0, 0.0, _cpu_seconds()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        result = verify_one()
        # Sandboxed programs run in a PID namespace whose CPU time never reaches our rusage;
        # the verifier reads it from /proc before it ends them.
        sandboxed += getattr(result, "details", {}).get("cpu_s") or 0.0
        count += 1
    queue.put((count, _cpu_seconds() - cpu + sandboxed))


def measure(
    factory: Callable[[], Callable[[], Any]], workers: int, seconds: float
) -> tuple[float, float]:
    """(verifications per wall second, per CPU second) over `workers` processes running for
    `seconds`. The CPU figure does not depend on how busy the machine is: on idle cores, N
    workers reach about N times it."""
    context = multiprocessing.get_context("fork")
    start, queue = context.Barrier(workers + 1), context.Queue()
    processes = [
        context.Process(target=_worker, args=(factory, seconds, start, queue))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    start.wait()
    began = time.perf_counter()
    results = [queue.get() for _ in processes]
    elapsed = time.perf_counter() - began
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a worker exited with {process.exitcode}")
    total = sum(count for count, _ in results)
    return total / elapsed, total / max(sum(cpu for _, cpu in results), 1e-9)


def main(argv: list[str] | None = None, extra: list[Case] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", help="Run only cases whose name contains this.")
    args = tiny.parse(parser, argv, seconds=0.3, workers=[1])
    print(f"cores: {os.cpu_count()}; {args.seconds:g} s per measurement; machine shared, noisy")
    with instant_judge() as judge_url:
        selected = [
            (name, factory)
            for name, factory in [*cases(judge_url), *(extra or [])]
            if not args.only or args.only in name
        ]
        header = f"{'verifier':<40}" + "".join(f"{f'{w} worker(s)':>16}" for w in args.workers)
        print(header + f"{'per CPU-second':>18}")
        print("-" * (len(header) + 18))
        for name, factory in selected:
            results = [measure(factory, workers, args.seconds) for workers in args.workers]
            walls = "".join(f"{wall:>12.1f} /s " for wall, _ in results)
            cpu = sum(per_cpu for _, per_cpu in results) / len(results)
            print(f"{name:<40}{walls}{cpu:>14.1f} /s", flush=True)


if __name__ == "__main__":
    main()
