"""The recording proxy: the one model endpoint an external agent sees, and the evidence of every
call it makes.

`RecordingProxy(client, seed=...)` is an async context manager. Inside it an HTTP server on
127.0.0.1 (a free port) speaks the OpenAI API an agent expects, `POST /v1/chat/completions` and
`POST /v1/responses`, streaming (`stream: true`, server-sent events) or not, and `GET /v1/models`.
Each call is forwarded through gymflow's own `ResponsesClient`, so it reaches `model.base_url` in
whichever API `model.kind` names (translated by the chat adapter), with gymflow's sampling
settings, seed placement, timeouts, retries, validation and secret redaction. The agent's own
temperature, limits and model name are replaced; its messages, tools and `tool_choice` are kept.
What was sent is what `calls` records: one `ModelCall` per HTTP attempt, in the order the agent's
requests arrived (`call_index`).

The upstream is always asked for a whole answer: that answer is validated and kept as received,
and a stream the agent asked for is told from it (`gymflow.models.sse`). A failed call reaches
the agent as the HTTP error it was (a context-length error stays a 400 naming
`context_length_exceeded`, so the agent stops as it would against the real server).

The proxy also refuses, and records as refused (`status` `error`):
- a request without the proxy's key (`api_key`, a random token per proxy: no other process on
  the machine can spend the rollout's model budget): `proxy_refused`, 401;
- a body that is not a JSON request object of that API, or over `MAX_BODY_BYTES`:
  `proxy_refused`, 400 or 413;
- any call once `deadline_s` has passed since the proxy started (the agent is over its time):
  `after_deadline`, 408.
An answer with no usage is passed on and recorded with its token counts unknown (None)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson
from aiohttp import web

from gymflow.core.records import ModelCall
from gymflow.models.chat_adapter import chat_to_request, response_to_completion
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.sse import completion_chunks, response_events

#: Longest request body an agent may send: a long agent conversation is a few MiB.
MAX_BODY_BYTES = 64 << 20
#: Failure kinds of the calls the proxy itself refused (never forwarded).
PROXY_REFUSED = "proxy_refused"
AFTER_DEADLINE = "after_deadline"
#: Request fields an agent sets that gymflow forwards; every other setting is gymflow's own.
AGENT_FIELDS = ("tool_choice", "parallel_tool_calls")

_CHAT, _RESPONSES = "/v1/chat/completions", "/v1/responses"


class RecordingProxy:
    """`async with RecordingProxy(client, seed=s) as proxy:` serves `proxy.base_url` (…/v1) with
    `proxy.api_key`; `proxy.calls` holds the `ModelCall` records, complete once the block ends."""

    def __init__(
        self,
        client: ResponsesClient,
        *,
        seed: int | None = None,
        deadline_s: float | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.client = client
        self.seed = seed
        self.deadline_s = deadline_s
        self.host = host
        self.api_key = "gymflow-proxy-" + secrets.token_hex(16)
        self.calls: list[ModelCall] = []
        self.base_url = ""
        self._requests = 0
        self._started = 0.0
        self._runner: web.AppRunner | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    async def __aenter__(self) -> RecordingProxy:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(_CHAT, self._serve)
        app.router.add_post(_RESPONSES, self._serve)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{port}/v1"
        self._started = time.monotonic()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            # Calls still in flight are cancelled: the rollout is over.
            await self._runner.cleanup()
            self._runner = None

    # -- what the harness reads ----------------------------------------------------------------
    def failure_kind(self) -> str | None:
        """The failure kind of the last request's final attempt, when it failed: what ended the
        agent when the model did (a context-length refusal, a dead server)."""
        if not self.calls:
            return None
        last = max(self.calls, key=lambda c: (c.call_index, c.attempt))
        return last.failure_kind

    # -- routes --------------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": self.client.config.name, "object": "model", "created": 0, "owned_by": "x"}
        return web.json_response({"object": "list", "data": [model]})

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        index = self._requests
        self._requests += 1
        chat = request.path == _CHAT
        if self.deadline_s is not None and time.monotonic() - self._started > self.deadline_s:
            message = f"the rollout's deadline ({self.deadline_s:g} s) has passed"
            return self._refuse(index, AFTER_DEADLINE, 408, message, None)
        if request.headers.get("authorization", "") != f"Bearer {self.api_key}":
            return self._refuse(index, PROXY_REFUSED, 401, "missing or wrong proxy key", None)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            message = f"request body over {MAX_BODY_BYTES >> 20} MiB"
            return self._refuse(index, PROXY_REFUSED, 413, message, None)
        body, problem = _request(raw, chat=chat)
        if problem is not None:
            return self._refuse(index, PROXY_REFUSED, 400, problem, body)
        outcome = await self.client.create(
            body["input"],
            tools=body.get("tools") or None,
            call_index=index,
            seed=self.seed,
            extra={key: body[key] for key in AGENT_FIELDS if key in body and body.get("tools")},
        )
        self.calls.extend(outcome.calls)
        return await _answer(request, outcome, body, chat=chat)

    def _refuse(
        self, index: int, kind: str, status: int, message: str, body: dict[str, Any] | None
    ) -> web.Response:
        self.calls.append(
            ModelCall(
                call_index=index,
                attempt=0,
                status="error",
                failure_kind=kind,
                http_status=status,
                latency_s=0.0,
                request=body or {},
                response=None,
                sampling={},
                error=message,
            )
        )
        return _error(status, message, kind)


def _request(raw: bytes, *, chat: bool) -> tuple[dict[str, Any] | None, str | None]:
    """The agent's request as a Responses API request (input items, tools, the agent's own
    fields, `stream`), or the reason it is not one. `instructions` become the first (system)
    message, so both upstream kinds receive them."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"request body is not JSON: {exc}"[:300]
    if not isinstance(body, dict):
        return None, "request body is not a JSON object"
    api = "chat completions" if chat else "Responses API"
    try:
        request = chat_to_request(body) if chat else dict(body)
    except (AttributeError, TypeError, KeyError) as exc:
        return body, f"not a {api} request: {type(exc).__name__}: {exc}"[:300]
    items = request.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        return body, f"not a {api} request: no input items (messages)"
    instructions = body.get("instructions") if not chat else None
    if isinstance(instructions, str) and instructions:
        items = [{"type": "message", "role": "system", "content": instructions}, *items]
    tools = request.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        return body, f"not a {api} request: tools is not a list of objects"
    request["input"] = items
    request["stream"] = body.get("stream") is True
    request["include_usage"] = bool((body.get("stream_options") or {}).get("include_usage"))
    return request, None


async def _answer(
    request: web.Request, outcome: CallOutcome, body: dict[str, Any], *, chat: bool
) -> web.StreamResponse:
    if outcome.error is not None or outcome.response is None:
        error = outcome.error
        status = (
            error.http_status if error and error.http_status and error.http_status >= 400 else 502
        )
        return _error(status, str(error), error.kind if error else "model_error")
    answer: dict[str, Any] = dict(outcome.response)
    if chat:
        answer = response_to_completion(answer)
    if not body["stream"]:
        return web.json_response(answer, dumps=lambda value: orjson.dumps(value).decode())
    if chat:
        data = completion_chunks(answer, include_usage=body["include_usage"])
    else:
        data = response_events(answer)
    stream = web.StreamResponse(
        headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
    )
    await stream.prepare(request)
    await stream.write(data)
    await stream.write_eof()
    return stream


def _error(status: int, message: str, code: str) -> web.Response:
    error = {"message": message, "type": "invalid_request_error" if status < 500 else "api_error"}
    return web.json_response({"error": {**error, "code": code}}, status=status)
