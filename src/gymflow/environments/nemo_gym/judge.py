"""The judge a NeMo Gym server asks, served by gymflow on 127.0.0.1.

A NeMo Gym judge server calls its judge model through its server client
(`POST /v1/responses` or `/v1/chat/completions` of a model server it names). Under gymflow that
client reaches this endpoint (`serve_app.judge_client`), which asks the judge the user configured
(`verifier_params.judge`: a model server, through gymflow's own model client) and keeps each call
as evidence of the rollout whose `/verify` asked (the `x-gymflow-rollout` header): the request
sent, the judge's text, status, latency and tokens. The resources take a rollout's calls with its
verdict (`take`), so they are stored in the verdict's details; a judge call that failed makes the
verdict a verifier error (`judge_failed`), never the 0 the server would give for it.

A raw ASGI app in a thread of gymflow's process, like the local policy server: no framework."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections import defaultdict
from typing import Any

import orjson

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.chat_adapter import chat_to_request
from gymflow.models.client import ResponsesClient
from gymflow.models.nemo_gym_shapes import nemo_request, nemo_response
from gymflow.models.responses import output_text
from gymflow.verifiers.nemo_gym import JudgeSettings

ROLLOUT_HEADER = b"x-gymflow-rollout"
#: A judge's text kept as evidence: enough to read its verdict, bounded for the store.
EVIDENCE_CHARS = 4000


def _input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A NeMo Gym judge request's input as gymflow's client sends it: its instructions as a
    system message first, a bare string as one user message."""
    given = body.get("input") or []
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
    if body.get("instructions"):
        items.insert(0, {"role": "system", "content": body["instructions"]})
    return items


class JudgeEndpoint:
    """`/v1/responses` and `/v1/chat/completions` answered by the configured judge."""

    def __init__(self, settings: JudgeSettings) -> None:
        self.settings = settings
        self.model = ModelConfig(
            kind=settings.kind,
            base_url=settings.base_url,
            name=settings.model,
            api_key_env=settings.api_key_env,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
        )
        self._client: ResponsesClient | None = None
        self._calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._lock = threading.Lock()
        self._index = 0

    def take(self, rollout: str) -> list[dict[str, Any]]:
        """The judge calls made for `rollout`, removed from the endpoint."""
        with self._lock:
            return self._calls.pop(rollout, [])

    def count(self, rollout: str) -> int:
        with self._lock:
            return len(self._calls.get(rollout, ()))

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return
        path, chat = scope.get("path", ""), scope.get("path", "").endswith("/chat/completions")
        if scope.get("method") != "POST" or not path.endswith(("/responses", "/chat/completions")):
            await _send(send, 404, {"error": f"gymflow's judge answers no {path}"})
            return
        rollout = dict(scope.get("headers") or ()).get(ROLLOUT_HEADER, b"").decode()
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        try:
            body = orjson.loads(b"".join(chunks))
            if chat:
                body = chat_to_request(body)
        except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
            await _send(send, 400, {"error": f"not a model request: {exc}"})
            return
        if not isinstance(body, dict) or not _input_items(body):
            # a probe, not a question (xstest posts `{"input": []}` at start to see that its
            # judge answers): answered at once, nothing asked of the judge or kept
            await _send(send, 400, {"error": "a judge request with no input asks nothing"})
            return
        status, answer = await self._ask(rollout, body, chat)
        await _send(send, status, answer)

    async def _ask(self, rollout: str, body: dict[str, Any], chat: bool) -> tuple[int, Any]:
        if self._client is None:
            sampling = Sampling(
                temperature=self.settings.temperature,
                top_p=None,
                max_output_tokens=self.settings.max_output_tokens,
            )
            self._client = ResponsesClient(self.model, self.settings.base_url, sampling)
        with self._lock:
            self._index += 1
            index = self._index
        started = time.monotonic()
        outcome = await self._client.create(
            _input_items(body), tools=None, call_index=index, seed=None
        )
        last = outcome.calls[-1] if outcome.calls else None
        text = output_text(outcome.response["output"]) if outcome.response else ""
        evidence = {
            "judge": self.settings.model,
            "request": last.request if last else None,
            "status": "ok" if outcome.error is None else "error",
            "error": str(outcome.error)[:500] if outcome.error else None,
            "http_status": last.http_status if last else None,
            "attempts": len(outcome.calls),
            "latency_s": round(time.monotonic() - started, 3),
            "input_tokens": last.input_tokens if last else None,
            "output_tokens": last.output_tokens if last else None,
            "text": text[:EVIDENCE_CHARS],
        }
        with self._lock:
            self._calls[rollout].append(evidence)
        if outcome.error is not None or outcome.response is None:
            return 502, {"error": f"the judge {self.settings.model} failed: {outcome.error}"}
        if chat:
            return 200, _completion(text, self.settings.model)
        request = nemo_request({**body, "model": self.settings.model})
        return 200, nemo_response(
            f"resp_judge_{index}",
            request,
            outcome.response["output"],
            model=self.settings.model,
            created_at=time.time(),
            incomplete=outcome.response.get("status") == "incomplete",
            usage=outcome.response.get("usage"),
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.__aexit__(None, None, None)
            self._client = None


def _completion(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-gymflow-judge",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }


async def _send(send, status: int, payload: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": orjson.dumps(payload)})


class JudgeServer:
    """The endpoint served on 127.0.0.1 from a thread of this process; `url` once started."""

    def __init__(self, settings: JudgeSettings) -> None:
        self.endpoint = JudgeEndpoint(settings)
        self.url = ""
        self._server = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.endpoint, log_level="warning", access_log=False, lifespan="off", loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
        self._thread = threading.Thread(
            target=self._serve, args=(sock,), name="gymflow-nemo-judge", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.url

    def _serve(self, sock: socket.socket) -> None:
        async def serve() -> None:
            try:
                await self._server.serve(sockets=[sock])
            finally:
                await self.endpoint.aclose()

        asyncio.run(serve())

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None
