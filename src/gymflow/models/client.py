"""An async model client with explicit timeouts, bounded retries and full evidence.

It speaks the Responses API to the caller whatever the server speaks: `model.kind` `responses` (and
`local`) posts to `/responses`; `chat_completions` posts to `/chat/completions` through the chat
adapter. Every HTTP attempt becomes a `ModelCall` record, successful or not; the caller gets the
parsed response or the final `ModelError`, never an exception it has to guess the meaning of.

Every answer is validated before anyone reads it (a chat completion before its translation too):
one that does not fit is `malformed_response` with the body kept as evidence; a response that did
not run to an answer (`queued`, `in_progress`, `cancelled`, no or empty output, or a completed
output of only reasoning) is `response_not_run`; an
answer over `max_response_bytes` is `response_too_large`, read no further than the bound. The
evidence of a call is the answer as received: a Responses answer's own text, or, for chat
completions, the translation with the completion as received under `received`.

Each rollout's seed goes where `model.seed_in` says (the body, `metadata.seed`, or nowhere), and
the call's `sampling` records what was sent.

The API key is read from the environment variable the config names, sent as a header, and never
stored: records hold the request body only, and any echo of the key in a server's answer (some
echo it in 401 messages), as written, JSON-escaped or URL-encoded, is replaced before the answer is
parsed or kept."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, quote_plus

import orjson
from pydantic import ValidationError

from gymflow.core.config import ModelConfig, Sampling
from gymflow.core.records import ModelCall
from gymflow.models.chat_adapter import COMPLETION, completion_to_response, request_to_chat
from gymflow.models.errors import (
    MalformedResponse,
    ModelError,
    Refused,
    ResponseNotRun,
    ResponseTooLarge,
    classify_failed_response,
    classify_http_error,
)
from gymflow.models.rate_limit import RequestSpacer
from gymflow.models.responses import RESPONSE, Response, refusal_text, unanswered
from gymflow.models.text_completions import TEXT_COMPLETION, request_to_text, text_to_chat
from gymflow.models.transport import JsonPoster

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()
_UNICODE_ESCAPE = re.compile(rb"\\u([0-9a-fA-F]{4})")
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
    """What one server kind is sent and how its answer becomes a Responses object: chat
    completions, or text completions under a chat template (`text_completions.py`), both read
    back through the chat adapter."""

    path: str
    chat: bool
    template: str | None = None

    @classmethod
    def of(cls, config: ModelConfig) -> _Wire:
        if config.kind == "completions":
            return cls("/completions", True, config.chat_template)
        if config.kind == "chat_completions":
            return cls("/chat/completions", True)
        return cls("/responses", False)

    def encode(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.template is not None:
            return request_to_text(body, self.template)
        return request_to_chat(body) if self.chat else body


#: Sampling parameters as recorded: under their Responses API names whatever the server kind, so
#: runs over either kind compare (the chat adapter sends max_output_tokens as max_tokens and
#: reasoning.effort as reasoning_effort, with the same values). tool_choice is recorded with them:
#: whether it was sent decides whether a server that ignores tools was asked to use them.
SAMPLING_KEYS = (
    "temperature", "top_p", "max_output_tokens", "seed", "metadata", "reasoning", "tool_choice",
)  # fmt: skip


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
        self._wire = _Wire.of(config)
        self._limit = asyncio.Semaphore(concurrency)
        self._spacer = (
            RequestSpacer(config.requests_per_minute) if config.requests_per_minute else None
        )
        headers = {"content-type": "application/json", "accept": "application/json"}
        self._secret = os.environ.get(config.api_key_env) if config.api_key_env else None
        self._secret_forms = secret_forms(self._secret) if self._secret else ()
        if self._secret:
            headers["authorization"] = f"Bearer {self._secret}"
        self._seed_in = config.seed_placement
        self._http = JsonPoster(
            self.base_url + self._wire.path,
            headers,
            max_connections=concurrency,
            timeout_s=config.timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            read_timeout_s=config.read_timeout_s,
            max_bytes=config.max_response_bytes,
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
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The Responses API request for these items (what the store keeps as the request).

        `extra` holds request fields gymflow does not set itself (an external agent's
        `tool_choice`, say, through the recording proxy); gymflow's own settings win over it."""
        body: dict[str, Any] = {
            **(extra or {}),
            "model": self.config.name,
            # A copy: harnesses extend their conversation in place, and the evidence must show
            # what this request held when it was sent.
            "input": list(input_items),
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_output_tokens": self.sampling.max_output_tokens,
        }
        for unset in ("temperature", "top_p"):  # null in the config: not sent
            if body[unset] is None:
                del body[unset]
        if seed is not None and self._seed_in == "body":
            body["seed"] = seed
        elif seed is not None and self._seed_in == "metadata":
            body["metadata"] = {"seed": str(seed)}  # metadata values are strings
        if self.sampling.reasoning_effort:
            body["reasoning"] = {"effort": self.sampling.reasoning_effort}
        if tools:
            body["tools"] = tools
            # Only beside tools: both APIs refuse a tool_choice with no tools (a 400).
            if self.config.tool_choice is not None:
                body["tool_choice"] = self.config.tool_choice
        return body

    async def create(
        self,
        input_items: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        call_index: int,
        seed: int | None,
        extra: Mapping[str, Any] | None = None,
    ) -> CallOutcome:
        body = self.request_body(input_items, tools, seed, extra)
        sampling = {key: body[key] for key in SAMPLING_KEYS if key in body}
        outcome = CallOutcome(None)
        try:
            content = orjson.dumps(self._wire.encode(body))
        except ModelError as exc:  # a request this server kind cannot take: on record, not sent
            outcome.error = exc
            outcome.calls.append(
                ModelCall(
                    call_index=call_index,
                    attempt=0,
                    status=_call_status(None, exc),
                    failure_kind=exc.kind,
                    http_status=None,
                    latency_s=0.0,
                    request=body,
                    response=None,
                    sampling=sampling,
                    error=str(exc),
                )
            )
            return outcome
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
        """Retry-After when the server gave one, else exponential backoff with jitter: a uniform
        50-100% of backoff_s * 2**attempt, so clients that failed together retry apart. Both
        capped at MAX_RETRY_AFTER_S: `max_retries: 20` doubled the wait to three days."""
        if error.retry_after is not None:
            return min(error.retry_after, MAX_RETRY_AFTER_S)
        doubled = self.config.backoff_s * 2.0 ** min(attempt, 64)
        return min(doubled, MAX_RETRY_AFTER_S) * random.uniform(0.5, 1.0)

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, REDACTED) if self._secret else text

    def _redact_answer(self, answer: bytes) -> bytes:
        for form in self._secret_forms:
            answer = answer.replace(form, REDACTED_BYTES)
        if b"\\u" in answer:
            # `\uXXXX` escapes can spell the key any way: compare the decoded text instead
            # (escape by escape when the answer is not whole JSON, e.g. a too-large answer's head).
            try:
                decoded = orjson.dumps(orjson.loads(answer))
            except orjson.JSONDecodeError:
                decoded = _UNICODE_ESCAPE.sub(_unescaped, answer)
            if any(form in decoded for form in self._secret_forms):
                for form in self._secret_forms:
                    decoded = decoded.replace(form, REDACTED_BYTES)
                return decoded
        return answer

    def _redact_split_text(self, response: Response) -> bool:
        """The answer text as the harness joins it (`output_text`), redacted: a key split
        across two text parts is whole in no byte string `_redact_answer` sees. The redacted text
        goes in the first text slot and the others are emptied, so the joined text is exactly
        the redacted one. True when anything changed."""
        slots: list[tuple[dict[str, Any], str]] = []
        for item in response.get("output") or ():
            if item.get("type") != "message" or item.get("role", "assistant") != "assistant":
                continue
            content = item.get("content")
            if isinstance(content, str):
                slots.append((item, "content"))
            for part in content if isinstance(content, list) else ():
                if part.get("type") in ("output_text", "text"):
                    slots.append((part, "text"))
        joined = "".join(holder.get(key) or "" for holder, key in slots)
        redacted = joined
        for form in self._secret_forms:
            redacted = redacted.replace(form.decode(), REDACTED)
        if redacted == joined:
            return False
        for index, (holder, key) in enumerate(slots):
            holder[key] = redacted if index == 0 else ""
        return True

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
        evidence: str | None = None
        response: Response | None = None
        error: ModelError | None = None
        try:
            async with self._limit:
                started = time.perf_counter()
                reply = await self._http.post(content)
            status, answer = reply.status, reply.body
            if self._secret_forms:  # some servers echo the key, in a 401's message or a 200
                answer = self._redact_answer(answer)
            if status >= 400:
                raise classify_http_error(status, _text(answer), retry_after_s(reply.headers))
            evidence, response = self._decode(answer, status)
            if self._secret_forms and self._redact_split_text(response):
                evidence = orjson.dumps(response).decode()
            unusable = _unusable(response, status)
            if unusable is not None:
                raise unusable
        except ResponseTooLarge as exc:
            error, status = exc, exc.http_status
            answer = self._redact_answer(exc.head) if self._secret_forms else exc.head
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
            response=evidence if evidence is not None else (_text(answer) or None),
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

    def _decode(self, answer: bytes, status: int) -> tuple[str, Response]:
        """The answer's evidence (as received) and the validated Responses object the harness
        reads, or MalformedResponse naming where it does not fit."""
        try:
            payload = orjson.loads(answer)
        except orjson.JSONDecodeError as exc:
            raise MalformedResponse(f"not JSON: {exc}"[:500], http_status=status) from None
        received = payload
        if self._wire.template is not None:
            try:
                TEXT_COMPLETION.validate_python(payload)
            except ValidationError as exc:
                raise _malformed("text completion", exc, status) from None
            payload = text_to_chat(payload)
        if self._wire.chat:
            try:
                COMPLETION.validate_python(payload)
            except ValidationError as exc:
                raise _malformed("chat completion", exc, status) from None
            payload = completion_to_response(payload)
        try:
            response = RESPONSE.validate_python(payload)
        except ValidationError as exc:
            raise _malformed("Responses API object", exc, status) from None
        if self._wire.chat:  # the translation, and beside it the completion as it came
            evidence = orjson.dumps({**payload, "received": received}).decode()
        else:
            evidence = _text(answer)
        return evidence, response


def _unusable(response: Response, status: int) -> ModelError | None:
    """The failure a well-formed answer still means: failed, not run, or refused."""
    state = response.get("status")
    if state == "failed" or response.get("error"):
        # an error object says the response failed whatever its status claims (the importer
        # reads a NeMo Gym line the same way): its partial output is no answer to score
        return classify_failed_response(response.get("error"), status)
    output = response.get("output")
    refusal = refusal_text(output or [])
    if refusal is None and (response.get("incomplete_details") or {}).get("reason") == (
        "content_filter"
    ):
        refusal = "no answer: incomplete, content_filter"
    if refusal is not None:
        return Refused(f"the model refused: {refusal}"[:500], http_status=status)
    reason = unanswered(state, output)
    return None if reason is None else ResponseNotRun(reason, http_status=status)


def _unescaped(match: re.Match[bytes]) -> bytes:
    return chr(int(match[1], 16)).encode("utf-8", "surrogatepass")


def secret_forms(secret: str) -> tuple[bytes, ...]:
    """The ways a server may echo the key in JSON text: as written, JSON-escaped (with or without
    `/` escaped), URL-encoded (either hex case, `+` or `%20` for spaces). The key itself first."""
    escaped = json.dumps(secret)[1:-1]
    quoted = quote(secret, safe="")
    forms = [
        secret,
        escaped,
        escaped.replace("/", "\\/"),
        quoted,
        quoted.lower(),
        quote_plus(secret),
    ]
    return tuple(dict.fromkeys(form.encode() for form in forms))


def _malformed(what: str, exc: ValidationError, status: int) -> MalformedResponse:
    """One line naming where the answer does not fit, e.g. `output.0.message.content.str`."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(top level)'}: {error['msg']}"
        for error in exc.errors(include_url=False)[:3]
    )
    return MalformedResponse(f"not a {what}: {problems}"[:500], http_status=status)


def _text(answer: bytes) -> str:
    # JSON is UTF-8 (RFC 8259): no per-answer charset sniffing.
    return answer.decode("utf-8", errors="replace")


def _call_status(response: Response | None, error: ModelError | None) -> str:
    if error is not None or response is None:
        return "error"
    return "incomplete" if response.get("status") == "incomplete" else "completed"
