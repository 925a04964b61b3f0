"""An async client for `/v1/responses` with explicit timeouts, bounded retries and full evidence.

Every HTTP attempt becomes a `ModelCall` record, successful or not; the caller gets the parsed
response or the final `ModelError`, never an exception it has to guess the meaning of."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from gymflow.config import ModelConfig, Sampling
from gymflow.models.errors import (
    MalformedResponse,
    ModelError,
    ModelTimeout,
    TransportFailure,
    classify_http_error,
)
from gymflow.models.responses import Response
from gymflow.records import ModelCall


@dataclass(slots=True)
class CallOutcome:
    response: Response | None
    raw: dict[str, Any] | None
    calls: list[ModelCall] = field(default_factory=list)
    error: ModelError | None = None


def make_transport(max_connections: int) -> httpx.AsyncBaseTransport:
    """httpx over aiohttp: httpx's own pool degrades under concurrency (see bench/)."""
    from httpx_aiohttp import AiohttpTransport

    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return AiohttpTransport(limits=limits)


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class ResponsesClient:
    """Calls a Responses API endpoint. Use as an async context manager."""

    def __init__(
        self, config: ModelConfig, base_url: str, sampling: Sampling, *, concurrency: int = 64
    ) -> None:
        self.config = config
        self.base_url = base_url.rstrip("/")
        self.sampling = sampling
        self._limit = asyncio.Semaphore(concurrency)
        headers = {"content-type": "application/json"}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if key:
                headers["authorization"] = f"Bearer {key}"
        self._http = httpx.AsyncClient(
            transport=make_transport(concurrency),
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
        )

    async def __aenter__(self) -> ResponsesClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    def sampling_params(self, seed: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_output_tokens": self.sampling.max_output_tokens,
        }
        if seed is not None:
            params["seed"] = seed
        return params

    async def create(
        self,
        input_items: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        call_index: int,
        seed: int | None,
    ) -> CallOutcome:
        sampling = self.sampling_params(seed)
        body: dict[str, Any] = {"model": self.config.name, "input": input_items, **sampling}
        if tools:
            body["tools"] = tools
        outcome = CallOutcome(None, None)
        for attempt in range(self.config.max_retries + 1):
            call, response, raw, error = await self._attempt(body, call_index, attempt, sampling)
            outcome.calls.append(call)
            if error is None:
                outcome.response, outcome.raw, outcome.error = response, raw, None
                return outcome
            outcome.error = error
            if not error.retryable or attempt == self.config.max_retries:
                return outcome
            await asyncio.sleep(self._delay(attempt, error))
        return outcome

    def _delay(self, attempt: int, error: ModelError) -> float:
        if error.retry_after is not None:
            return error.retry_after
        base = self.config.backoff_s * (2**attempt)
        return base * (0.5 + random.random() / 2)

    async def _attempt(
        self, body: dict[str, Any], call_index: int, attempt: int, sampling: dict[str, Any]
    ):
        started = time.perf_counter()
        status: int | None = None
        text = ""
        try:
            async with self._limit, asyncio.timeout(self.config.timeout_s):
                reply = await self._http.post(f"{self.base_url}/responses", json=body)
                status = reply.status_code
                text = reply.text
            if status >= 400:
                raise classify_http_error(status, text, _retry_after(reply.headers))
            try:
                raw = json.loads(text)
                response = Response.model_validate(raw)
            except (json.JSONDecodeError, ValidationError) as exc:
                raise MalformedResponse(
                    f"not a Responses API object: {exc}"[:500], http_status=status
                ) from None
        except ModelError as error:
            return (
                self._record(
                    body, call_index, attempt, sampling, started, status, text, None, error
                ),
                None,
                None,
                error,
            )
        except (TimeoutError, httpx.TimeoutException):
            error = ModelTimeout(f"no complete answer within {self.config.timeout_s}s")
            return (
                self._record(
                    body, call_index, attempt, sampling, started, status, text, None, error
                ),
                None,
                None,
                error,
            )
        except (httpx.TransportError, OSError) as exc:
            error = TransportFailure(f"{type(exc).__name__}: {exc}")
            return (
                self._record(
                    body, call_index, attempt, sampling, started, status, text, None, error
                ),
                None,
                None,
                error,
            )
        call = self._record(
            body, call_index, attempt, sampling, started, status, raw, response, None
        )
        return call, response, raw, None

    @staticmethod
    def _record(
        body,
        call_index,
        attempt,
        sampling,
        started,
        status,
        payload,
        response: Response | None,
        error: ModelError | None,
    ) -> ModelCall:
        usage = response.usage if response else None
        if error is not None:
            state = "error"
        else:
            state = "incomplete" if response.status == "incomplete" else "completed"
        return ModelCall(
            call_index=call_index,
            attempt=attempt,
            status=state,
            failure_kind=error.kind if error else None,
            http_status=status,
            latency_s=time.perf_counter() - started,
            request=body,
            response=payload,
            sampling=sampling,
            input_tokens=usage.input_tokens if usage else None,
            cached_tokens=usage.input_tokens_details.cached_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            reasoning_tokens=usage.output_tokens_details.reasoning_tokens if usage else None,
            error=str(error) if error else None,
        )
