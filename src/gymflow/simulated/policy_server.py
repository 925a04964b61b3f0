"""The local policy server: a real HTTP server speaking `/v1/responses` and `/v1/chat/completions`,
seeded and deterministic.

It is a simulation, and says so in every response's `model` field. It answers from each task's
reference (or a plausible wrong answer) with a per-task skill, and can inject every fault the client
must tell apart: latency, 429, 500, malformed JSON, truncated (`incomplete`) output, timeouts, a
context-length error, a refusal and a dropped connection. A raw ASGI app, not a framework, because
it is the other half of every throughput figure gymflow publishes.

Routes besides the two model endpoints: `GET /health`, `GET /v1/models`, `POST /_gymflow/faults`
(`{"schedule": ["429", "ok", ...]}`: the next requests get these faults, in order) and
`GET /_gymflow/stats` (requests served; in flight now, at most, and its time-integral)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from gymflow.core.config import FaultSpec, SimulatedBehaviour
from gymflow.models.chat_adapter import chat_to_request, response_to_completion
from gymflow.simulated import SIMULATED_MODEL
from gymflow.simulated.policy import (
    PolicyEntry,
    call_turns,
    decide,
    load_table,
    prompt_key,
    rambling,
    said_in_prose,
    unit_draw,
    without_tools,
)

#: Fault names a schedule may hold ("ok" means no fault), in the order rates are drawn.
FAULT_KINDS = (
    "timeout",
    "429",
    "500",
    "malformed",
    "truncated",
    "context_length",
    "refused",
    "reset",
)


#: Joins a function call's id to the id of the reasoning item it was made with.
_WITH = "_with_"


class SimulatedReset(Exception):
    """Raised after the response has started, so the server drops the connection mid-answer."""


class _QuietReset(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], SimulatedReset))


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


def _system_text(items: list[dict[str, Any]]) -> str:
    texts = []
    for item in items:
        if item.get("type", "message") == "message" and item.get("role") in ("system", "developer"):
            content = item.get("content")
            texts.append(
                content
                if isinstance(content, str)
                else "".join(p.get("text", "") for p in content or ())
            )
    return "\n".join(texts)


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or () if t.get("type") == "function"]


class PolicyApp:
    def __init__(
        self,
        table: dict[str, PolicyEntry],
        *,
        seed: int = 0,
        faults: FaultSpec | None = None,
        behaviour: SimulatedBehaviour | None = None,
        timeout_sleep_s: float = 3600.0,
    ) -> None:
        self.table = table
        self.seed = seed
        self.faults = faults or FaultSpec()
        self.behaviour = behaviour or SimulatedBehaviour()
        self.schedule: list[str] = []
        self.timeout_sleep_s = timeout_sleep_s
        self._seen: Counter[str] = Counter()
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        # Time-integral of in_flight: its growth over a window, divided by the window, is the
        # mean number of requests in flight (the concurrency a client really achieved).
        self.in_flight_seconds = 0.0
        self._changed = time.perf_counter()

    # -- policy --------------------------------------------------------------------------------
    def _fault(self, body_key: str) -> str | None:
        if self.schedule:
            kind = self.schedule.pop(0)
            return None if kind == "ok" else kind
        f = self.faults
        # Keyed on the body and how often it was seen, so a retry can succeed and the outcome
        # does not depend on which request happened to arrive first.
        u = unit_draw("fault", self.seed, body_key, self._seen[body_key])
        rates = (
            f.rate_timeout,
            f.rate_429,
            f.rate_500,
            f.rate_malformed,
            f.rate_truncated,
            f.rate_context_length,
            f.rate_refused,
            f.rate_reset,
        )
        for kind, rate in zip(FAULT_KINDS, rates, strict=True):
            if u < rate:
                return kind
            u -= rate
        return None

    def _skill(self, entry: PolicyEntry, items: list[dict[str, Any]]) -> float:
        behaviour = self.behaviour
        skill = entry.skill if behaviour.skill is None else behaviour.skill
        needed = behaviour.needs_instructions
        if needed and needed not in _system_text(items):
            skill /= 2
        return skill

    def _step(
        self, entry: PolicyEntry, items: list[dict[str, Any]], body: dict[str, Any]
    ) -> list[dict[str, Any]] | str:
        """The policy's next step for `entry`, with the behaviours broken on purpose applied."""
        behaviour = self.behaviour
        skill = self._skill(entry, items)
        correct = decide(entry, server_seed=self.seed, request_seed=body.get("seed"), skill=skill)

        def draw(*parts: object) -> float:
            return unit_draw(self.seed, body.get("seed"), entry.task_id, *parts)

        step = entry.step(items, correct=correct, tools=_tool_names(body), draw=draw)
        if body.get("tool_choice") == "none" and not isinstance(step, str):
            # Told not to call tools, as both APIs define it: a plan that needs them ends.
            step = "I was asked not to call a tool, and cannot answer without one."
        if behaviour.tools == "ignore" and not isinstance(step, str):
            step = without_tools(entry, step, correct=correct)
        if isinstance(step, str) and not correct and draw("ramble") < behaviour.ramble:
            step = rambling(step, body.get("max_output_tokens"))
        if isinstance(step, str) and behaviour.answer_form == "prose":
            step = said_in_prose(step)
        return step

    def respond(self, body: dict[str, Any], fault: str | None = None) -> dict[str, Any]:
        """The Responses API object for `body`; `fault` may be "truncated" or "refused"."""
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        ids = _item_ids(body)
        entry = self.table.get(prompt_key(_first_user_text(items)))
        if fault == "refused":
            step: list[dict[str, Any]] | str = ""
        elif entry is None:
            step = "I am a simulated policy and do not know this task."
        else:
            step = self._step(entry, items, body)
        output: list[dict[str, Any]] = []
        reasoning_tokens = 0
        if body.get("reasoning") and fault != "refused":
            thought = "Simulated reasoning: follow the plan for this task."
            output.append(_reasoning(thought, next(ids)))
            reasoning_tokens = _tokens(thought)
        max_tokens = int(body.get("max_output_tokens") or 1 << 30)
        status, incomplete = "completed", None
        if fault == "refused":
            output.append(_refusal("I can't help with that. (simulated refusal)", next(ids)))
            out_tokens = 8
        elif isinstance(step, str):
            text = step
            if fault == "truncated" or _tokens(text) > max_tokens:
                keep = min(len(text) // 2, max_tokens * 4)
                text, status = text[:keep], "incomplete"
                incomplete = {"reason": "max_output_tokens"}
            output.append(_message(text, status, next(ids)))
            out_tokens = min(_tokens(text), max_tokens)
        else:
            turn = len(call_turns(items))
            # A call made with reasoning names its reasoning item in its id, as `_missing_reasoning`
            # expects when the call comes back.
            thought_id = output[0]["id"] if output else None
            output.extend(
                _call(call, turn, i, next(ids), thought_id) for i, call in enumerate(step)
            )
            out_tokens = sum(_tokens(o["arguments"]) + 2 for o in output if "arguments" in o)
        out_tokens += reasoning_tokens
        in_tokens = sum(_tokens(json.dumps(i)) for i in items)
        return {
            "id": f"resp_{next(ids)}",
            "object": "response",
            "created_at": 0,
            "model": SIMULATED_MODEL,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "max_output_tokens": body.get("max_output_tokens"),
            "reasoning": body.get("reasoning"),
            "usage": {
                "input_tokens": in_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": out_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": in_tokens + out_tokens,
            },
            "metadata": {"simulation": "gymflow local policy server; answers are simulated"},
        }

    # -- ASGI ----------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body = await _read_body(scope, receive)
        if body is None:
            message = f"request body over {MAX_BODY_BYTES >> 20} MiB"
            await _send(send, 413, {"error": {"message": message}})
            return
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
        elif path == "/v1/models" and method == "GET":
            model = {"id": SIMULATED_MODEL, "object": "model", "created": 0, "owned_by": "gymflow"}
            await _send(send, 200, {"object": "list", "data": [model]})
        elif path in ("/v1/responses", "/v1/chat/completions") and method == "POST":
            self.requests += 1
            self._in_flight_changes(+1)
            try:
                await self._model(body, send, chat=path.endswith("/chat/completions"))
            finally:
                self._in_flight_changes(-1)
        elif path == "/_gymflow/faults" and method == "POST":
            request = _json_object(body)
            schedule = request.get("schedule") if request is not None else None
            if not isinstance(schedule, list) or not all(isinstance(k, str) for k in schedule):
                message = 'expected a JSON object {"schedule": [fault kind, ...]}'
                await _send(send, 400, {"error": {"message": message}})
                return
            unknown = sorted(set(schedule) - {*FAULT_KINDS, "ok"})
            if unknown:
                message = f"unknown fault kinds {unknown}; known: {[*FAULT_KINDS, 'ok']}"
                await _send(send, 400, {"error": {"message": message}})
                return
            self.schedule = schedule
            await _send(send, 200, {"schedule": self.schedule})
        elif path == "/_gymflow/stats" and method == "GET":
            self._in_flight_changes(0)
            stats = {"requests": self.requests, "in_flight": self.in_flight}
            stats["in_flight_seconds"] = self.in_flight_seconds
            await _send(send, 200, {**stats, "peak_in_flight": self.peak_in_flight})
        else:
            await _send(send, 404, {"error": {"message": f"no route {method} {path}"}})

    def _in_flight_changes(self, delta: int) -> None:
        now = time.perf_counter()
        self.in_flight_seconds += self.in_flight * (now - self._changed)
        self._changed = now
        self.in_flight += delta
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    async def _model(self, raw: bytes, send, *, chat: bool) -> None:
        body = _json_object(raw)
        if body is None:
            await _send(send, 400, {"error": {"message": "request body is not a JSON object"}})
            return
        try:
            await self._answer(raw, body, send, chat=chat)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            # A field of the wrong shape (`input: 5`, a message that is a list): the request's
            # fault, said as a 400 (it was a 500 with a traceback in the server's log).
            message = f"request body is not a {'chat completions' if chat else 'Responses API'} "
            message += f"request: {type(exc).__name__}: {exc}"[:300]
            await _send(send, 400, {"error": {"message": message, "type": "invalid_request_error"}})

    async def _answer(self, raw: bytes, body: dict[str, Any], send, *, chat: bool) -> None:
        if chat:
            body = chat_to_request(body)
        body_key = prompt_key(raw.decode())
        fault = self._fault(body_key)
        self._seen[body_key] += 1
        if self.faults.latency_ms:
            await asyncio.sleep(self.faults.latency_ms / 1000)
        if fault == "timeout":
            await asyncio.sleep(self.timeout_sleep_s)
        missing = _missing_reasoning(body)
        if fault == "429":
            error = {"message": "simulated rate limit", "type": "rate_limit_error"}
            await _send(send, 429, {"error": error}, headers=[(b"retry-after", b"0")])
        elif fault == "500":
            await _send(send, 500, {"error": {"message": "simulated server error"}})
        elif fault == "malformed":
            await _send_raw(send, 200, b'{"id": "resp_broken", "output": [')
        elif fault == "context_length":
            error = {
                "message": "This model's maximum context length is 128 tokens (simulated).",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
            await _send(send, 400, {"error": error})
        elif fault == "reset":
            await _drop_connection(send)
        elif missing:
            error = {"message": missing, "type": "invalid_request_error", "param": "input"}
            await _send(send, 400, {"error": error})
        else:
            response = self.respond(body, fault)
            await _send(send, 200, response_to_completion(response) if chat else response)


#: Longest request body read: a long conversation is a few MiB; 100 MB read by repeated
#: concatenation took 59 s.
MAX_BODY_BYTES = 64 << 20


async def _read_body(scope, receive) -> bytes | None:
    """The request's body in linear time, or None once it is over MAX_BODY_BYTES (a declared
    Content-Length over it is refused before anything is read)."""
    for name, value in scope.get("headers") or ():
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
            return None
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _missing_reasoning(body: dict[str, Any]) -> str | None:
    """As reasoning models do: a function call passed back without the reasoning item it came
    with is rejected, so a harness that drops reasoning items is caught."""
    items = body.get("input") or []
    if not isinstance(items, list):
        return None
    present = {item.get("id") for item in items if item.get("type") == "reasoning"}
    for item in items:
        _, sep, needed = str(item.get("id") or "").partition(_WITH)
        if item.get("type") == "function_call" and sep and needed not in present:
            return (
                f"Item {item['id']!r} of type 'function_call' was provided without its required "
                f"'reasoning' item: {needed!r}."
            )
    return None


def _reasoning(text: str, item_id: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{item_id}",
        "summary": [{"type": "summary_text", "text": text}],
        "status": "completed",
    }


def _message(text: str, status: str, item_id: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{item_id}",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _refusal(text: str, item_id: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{item_id}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": text}],
    }


def _call(
    call: dict[str, Any], turn: int, index: int, item_id: str, reasoning_id: str | None
) -> dict[str, Any]:
    arguments = call["arguments"]
    return {
        "type": "function_call",
        "id": f"fc_{item_id}{_WITH}{reasoning_id}" if reasoning_id else f"fc_{item_id}",
        "call_id": f"call_{turn}_{index}",
        "name": call["name"],
        # A plan may carry raw argument text to play a malformed call.
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "status": "completed",
    }


def _item_ids(body: dict[str, Any]) -> Iterator[str]:
    """Ids derived from the request, not from a server-wide counter, so a request gets the same
    response whatever order requests arrive in: sharded and unsharded runs match byte for byte."""
    base = prompt_key(orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode())[:16]
    return (f"{base}_{i}" for i in itertools.count())


async def _drop_connection(send) -> None:
    # A body shorter than its Content-Length, then an error: the server closes the socket and the
    # client sees the connection end mid-answer, as with a crashed or restarted upstream.
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"id": "resp_', "more_body": True})
    raise SimulatedReset("simulated connection reset")


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


def serve(app: PolicyApp, *, host: str, port: int, ready_fd: int | None = None) -> None:
    """Serve `app` until interrupted (uvicorn, one process); once it listens, write one byte to
    `ready_fd` (a pipe the launching process waits on) and close it."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started and ready_fd is not None:
                os.write(ready_fd, b"1")
                os.close(ready_fd)

    logging.getLogger("uvicorn.error").addFilter(_QuietReset())
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        # A simulated timeout holds its request open for an hour; stopping must not wait for it.
        timeout_graceful_shutdown=1,
    )
    Server(config).run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="gymflow local policy server (a simulation)")
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faults", default="{}", help="FaultSpec as JSON")
    parser.add_argument("--behaviour", default="{}", help="SimulatedBehaviour as JSON")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    parser.add_argument("--ready-fd", type=int, help="write a byte to this pipe once listening")
    args = parser.parse_args(argv)
    if args.parent_pid:
        threading.Thread(target=_exit_with_parent, args=(args.parent_pid,), daemon=True).start()
    app = PolicyApp(
        load_table(args.table),
        seed=args.seed,
        faults=FaultSpec.model_validate_json(args.faults),
        behaviour=SimulatedBehaviour.model_validate_json(args.behaviour),
    )
    serve(app, host=args.host, port=args.port, ready_fd=args.ready_fd)


if __name__ == "__main__":
    main()
