"""The local policy server: a real HTTP server speaking `/v1/responses`, seeded and deterministic.

It is a simulation, and says so in every response's `model` field. It answers from each task's
reference (or a plausible wrong answer) with a per-task skill, and can inject faults: latency, 429,
500, malformed JSON, truncated (`incomplete`) output and timeouts. A raw ASGI app, not a framework,
because it is the other half of every throughput figure gymflow publishes."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from gymflow.config import FaultSpec
from gymflow.models.policy import (
    PolicyEntry,
    decide,
    load_table,
    prompt_key,
    turns_taken,
    unit_draw,
)

SIMULATED_MODEL = "gymflow-simulated-policy"
FAULT_KINDS = ("timeout", "429", "500", "malformed", "truncated")


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _first_user_text(items: list[dict[str, Any]]) -> str:
    for item in items:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(p.get("text", "") for p in content or ())
    return ""


class PolicyApp:
    def __init__(
        self,
        table: dict[str, PolicyEntry],
        *,
        seed: int = 0,
        faults: FaultSpec | None = None,
        timeout_sleep_s: float = 3600.0,
    ) -> None:
        self.table = table
        self.seed = seed
        self.faults = faults or FaultSpec()
        self.schedule: list[str] = []
        self.timeout_sleep_s = timeout_sleep_s
        self._seen: Counter[str] = Counter()
        self._ids = itertools.count()
        self.requests = 0

    # -- policy --------------------------------------------------------------------------------
    def _fault(self, body_key: str) -> str | None:
        if self.schedule:
            kind = self.schedule.pop(0)
            return None if kind == "ok" else kind
        f = self.faults
        # Keyed on the body and how often it was seen, so a retry can succeed and the outcome
        # does not depend on which request happened to arrive first.
        u = unit_draw("fault", self.seed, body_key, self._seen[body_key])
        for kind, rate in (
            ("timeout", f.rate_timeout),
            ("429", f.rate_429),
            ("500", f.rate_500),
            ("malformed", f.rate_malformed),
            ("truncated", f.rate_truncated),
        ):
            if u < rate:
                return kind
            u -= rate
        return None

    def respond(self, body: dict[str, Any], truncated: bool) -> dict[str, Any]:
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        entry = self.table.get(prompt_key(_first_user_text(items)))
        if entry is None:
            step: list[dict[str, Any]] | str = "I am a simulated policy and do not know this task."
        else:
            correct = decide(entry, server_seed=self.seed, request_seed=body.get("seed"))
            step = entry.turn(correct=correct, turn=turns_taken(items))
        max_tokens = int(body.get("max_output_tokens") or 1 << 30)
        status, incomplete = "completed", None
        if isinstance(step, str):
            text = step
            if truncated or _tokens(text) > max_tokens:
                keep = min(len(text) // 2, max_tokens * 4)
                text, status = text[:keep], "incomplete"
                incomplete = {"reason": "max_output_tokens"}
            output = [self._message(text, status)]
            out_tokens = min(_tokens(text), max_tokens)
        else:
            turn = turns_taken(items)
            output = [self._call(call, turn, i) for i, call in enumerate(step)]
            out_tokens = sum(_tokens(o["arguments"]) + 2 for o in output)
        in_tokens = sum(_tokens(json.dumps(i)) for i in items)
        return {
            "id": f"resp_{next(self._ids)}",
            "object": "response",
            "created_at": 0,
            "model": SIMULATED_MODEL,
            "status": status,
            "incomplete_details": incomplete,
            "output": output,
            "usage": {
                "input_tokens": in_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": out_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": in_tokens + out_tokens,
            },
            "metadata": {"simulation": "gymflow local policy server; answers are simulated"},
        }

    def _message(self, text: str, status: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_{next(self._ids)}",
            "role": "assistant",
            "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def _call(self, call: dict[str, Any], turn: int, index: int) -> dict[str, Any]:
        arguments = call["arguments"]
        return {
            "type": "function_call",
            "id": f"fc_{next(self._ids)}",
            "call_id": f"call_{turn}_{index}",
            "name": call["name"],
            # A plan may carry raw argument text to play a malformed call.
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            "status": "completed",
        }

    # -- ASGI ----------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        path, method = scope["path"], scope["method"]
        if path in ("/health", "/v1/health") and method == "GET":
            await _send(
                send,
                200,
                {
                    "status": "ok",
                    "model": SIMULATED_MODEL,
                    "tasks": len(self.table),
                    "requests": self.requests,
                },
            )
        elif path == "/v1/responses" and method == "POST":
            await self._responses(body, send)
        elif path == "/_gymflow/faults" and method == "POST":
            self.schedule = list(orjson.loads(body).get("schedule", []))
            await _send(send, 200, {"schedule": self.schedule})
        else:
            await _send(send, 404, {"error": {"message": f"no route {method} {path}"}})

    async def _responses(self, raw: bytes, send) -> None:
        self.requests += 1
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await _send(send, 400, {"error": {"message": "request body is not JSON"}})
            return
        body_key = prompt_key(raw.decode())
        fault = self._fault(body_key)
        self._seen[body_key] += 1
        if self.faults.latency_ms:
            await asyncio.sleep(self.faults.latency_ms / 1000)
        if fault == "timeout":
            await asyncio.sleep(self.timeout_sleep_s)
        if fault == "429":
            await _send(
                send,
                429,
                {"error": {"message": "simulated rate limit"}},
                headers=[(b"retry-after", b"0")],
            )
        elif fault == "500":
            await _send(send, 500, {"error": {"message": "simulated server error"}})
        elif fault == "malformed":
            await _send_raw(send, 200, b'{"id": "resp_broken", "output": [')
        else:
            await _send(send, 200, self.respond(body, truncated=fault == "truncated"))


async def _send(send, status: int, payload: Any, headers: list | None = None) -> None:
    await _send_raw(send, status, orjson.dumps(payload), headers)


async def _send_raw(send, status: int, data: bytes, headers: list | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _exit_with_parent(pid: int) -> None:
    """A collector killed with SIGKILL cannot stop its server; the server notices instead."""
    while True:
        time.sleep(0.5)
        if os.getppid() != pid:
            os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="gymflow local policy server (a simulation)")
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faults", default="{}", help="FaultSpec as JSON")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    args = parser.parse_args(argv)
    import uvicorn

    if args.parent_pid:
        threading.Thread(target=_exit_with_parent, args=(args.parent_pid,), daemon=True).start()

    app = PolicyApp(
        load_table(args.table), seed=args.seed, faults=FaultSpec.model_validate_json(args.faults)
    )
    uvicorn.run(
        app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="off"
    )


if __name__ == "__main__":
    main()
