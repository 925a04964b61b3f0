"""An async model client with explicit timeouts, bounded retries and full evidence.

It speaks the Responses API to the caller whatever the server speaks: `model.kind` `responses` (and
`local`) posts to `/responses`; `chat_completions` posts to `/chat/completions` through the chat
adapter. Every HTTP attempt becomes a `ModelCall` record, successful or not; the caller gets the
parsed response or the final `ModelError`, never an exception it has to guess the meaning of.

The API key is read from the environment variable the config names, sent as a header, and never
stored: records hold the request body only, and any echo of the key in a server's answer (some
echo it in 401 messages) is replaced before it is parsed or kept."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
from pydantic import ValidationError

from gymflow.config import ModelConfig, Sampling
from gymflow.models.chat_adapter import completion_to_response, request_to_chat
from gymflow.models.errors import (
    MalformedResponse,
    ModelError,
    Refused,
    classify_failed_response,
    classify_http_error,
)
from gymflow.models.rate_limit import RequestSpacer
from gymflow.models.responses import RESPONSE, Response, refusal_text
from gymflow.models.transport import JsonPoster
from gymflow.records import ModelCall

REDACTED = "[redacted]"
#: Longest wait a server's Retry-After may impose before a retry; longer ones are capped.
MAX_RETRY_AFTER_S = 120.0


@dataclass(slots=True)
class CallOutcome:
    response: Response | None  # the validated answer of the last attempt, when it succeeded
    calls: list[ModelCall] = field(default_factory=list)
    error: ModelError | None = None


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asked us to wait: `retry-after-ms`, or `retry-after` as seconds or date."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True, slots=True)
class _Wire:
    """What one server kind is sent and how its answer becomes a Responses object."""

    path: str
    chat: bool

    def encode(self, body: dict[str, Any]) -> dict[str, Any]:
        return request_to_chat(body) if self.chat else body

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        return completion_to_response(payload) if self.chat else payload


#: Sampling parameters as recorded: under their Responses API names whatever the server kind, so
#: runs over either kind compare (the chat adapter sends max_output_tokens as max_tokens and
#: reasoning.effort as reasoning_effort, with the same values).
SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens", "seed", "reasoning")


class ResponsesClient:
    """Calls a model server. Use as an async context manager."""

    def __init__(
        self,
        config: ModelConfig,
        base_url: str,
        sampling: Sampling,
        *,
        concurrency: int = 64,
    ) -> None:
        self.config = config
        self.base_url = base_url.rstrip("/")
        self.sampling = sampling
        chat = config.kind == "chat_completions"
        self._wire = _Wire("/chat/completions" if chat else "/responses", chat)
        self._limit = asyncio.Semaphore(concurrency)
        self._spacer = (
            RequestSpacer(config.requests_per_minute) if config.requests_per_minute else None
        )
        headers = {"content-type": "application/json", "accept": "application/json"}
        self._secret = os.environ.get(config.api_key_env) if config.api_key_env else None
        if self._secret:
            headers["authorization"] = f"Bearer {self._secret}"
        self._http = JsonPoster(
            self.base_url + self._wire.path,
            headers,
            max_connections=concurrency,
            timeout_s=config.timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            read_timeout_s=config.read_timeout_s,
        )

    async def __aenter__(self) -> ResponsesClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    def request_body(
        self,
        input_items: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        seed: int | None,
    ) -> dict[str, Any]:
        """The Responses API request for these items (what the store keeps as the request)."""
        body: dict[str, Any] = {
            "model": self.config.name,
            # A copy: harnesses extend their conversation in place, and the evidence must show
            # what this request held when it was sent.
            "input": list(input_items),
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_output_tokens": self.sampling.max_output_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        if self.sampling.reasoning_effort:
            body["reasoning"] = {"effort": self.sampling.reasoning_effort}
        if tools:
            body["tools"] = tools
        return body

    async def create(
        self,
        input_items: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        call_index: int,
        seed: int | None,
    ) -> CallOutcome:
        body = self.request_body(input_items, tools, seed)
        content = orjson.dumps(self._wire.encode(body))
        sampling = {key: body[key] for key in SAMPLING_KEYS if key in body}
        outcome = CallOutcome(None)
        for attempt in range(self.config.max_retries + 1):
            call, response, error = await self._attempt(
                content, body, sampling, call_index, attempt
            )
            outcome.calls.append(call)
            outcome.error = error
            if error is None:
                outcome.response = response
                return outcome
            if not error.retryable or attempt == self.config.max_retries:
                return outcome
            await asyncio.sleep(self.backoff(attempt, error))
        return outcome

    def backoff(self, attempt: int, error: ModelError) -> float:
        """Retry-After when the server gave one (capped), else exponential backoff with jitter:
        a uniform 50-100% of backoff_s * 2**attempt, so clients that failed together retry apart."""
        if error.retry_after is not None:
            return min(error.retry_after, MAX_RETRY_AFTER_S)
        return self.config.backoff_s * (2**attempt) * random.uniform(0.5, 1.0)

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, REDACTED) if self._secret else text

    async def _attempt(
        self,
        content: bytes,
        body: dict[str, Any],
        sampling: dict[str, Any],
        call_index: int,
        attempt: int,
    ) -> tuple[ModelCall, Response | None, ModelError | None]:
        if self._spacer is not None:
            await self._spacer.wait()
        started = time.perf_counter()
        status: int | None = None
        answer = b""
        raw: dict[str, Any] | None = None
        response: Response | None = None
        error: ModelError | None = None
        try:
            async with self._limit:
                started = time.perf_counter()
                reply = await self._http.post(content)
            status, answer = reply.status, reply.body
            if self._secret:  # some servers echo the key in a 401's message
                answer = answer.replace(self._secret.encode(), REDACTED.encode())
            if status >= 400:
                raise classify_http_error(status, _text(answer), retry_after_s(reply.headers))
            raw, response = self._parse(answer, status)
        except ModelError as exc:
            error = exc
        call = ModelCall(
            call_index=call_index,
            attempt=attempt,
            status=_call_status(response, error),
            failure_kind=error.kind if error else None,
            http_status=status,
            latency_s=time.perf_counter() - started,
            request=body,
            response=_evidence(raw) if raw is not None else (_text(answer) or None),
            sampling=sampling,
            error=self._redact(str(error)) if error else None,
        )
        usage = response.get("usage") if response else None
        if usage:
            call.input_tokens = usage["input_tokens"]
            call.cached_tokens = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
            call.output_tokens = usage["output_tokens"]
            call.reasoning_tokens = (usage.get("output_tokens_details") or {}).get(
                "reasoning_tokens", 0
            )
        return call, response if error is None else None, error

    def _parse(self, answer: bytes, status: int) -> tuple[dict[str, Any], Response]:
        """The answer as received (the evidence) and as validated (what the harness reads)."""
        try:
            raw = self._wire.decode(orjson.loads(answer))
            response = RESPONSE.validate_python(raw)
        except (json.JSONDecodeError, ValidationError, KeyError, IndexError, TypeError) as exc:
            what = "chat completion" if self._wire.chat else "Responses API object"
            raise MalformedResponse(f"not a {what}: {exc}"[:500], http_status=status) from None
        if response.get("status") == "failed":
            raise classify_failed_response(response.get("error"), status)
        refusal = refusal_text(response["output"])
        if refusal is not None:
            raise Refused(f"the model refused: {refusal}"[:500], http_status=status)
        return raw, response


def _evidence(raw: dict[str, Any]) -> str:
    """The answer as the store writes it: compact JSON text (the store's own encoding of the
    parsed answer, as orjson parsed it). Text, not the parsed dicts, because a call's record lives
    until its batch commits: an answer echoes every tool offered, and its dozens of dicts held that
    long were most of the collector's cyclic-GC work (backoffice, bench/e2e_rollouts.py)."""
    return orjson.dumps(raw).decode()


def _text(answer: bytes) -> str:
    # JSON is UTF-8 (RFC 8259): no per-answer charset sniffing.
    return answer.decode("utf-8", errors="replace")


def _call_status(response: Response | None, error: ModelError | None) -> str:
    if error is not None or response is None:
        return "error"
    return "incomplete" if response.get("status") == "incomplete" else "completed"
