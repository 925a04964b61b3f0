"""The HTTP transport under the model client's httpx API, and what its errors mean.

httpx's own connection pool degrades as concurrency rises (a per-request scan of the pool), so the
client runs httpx over aiohttp; bench/transport.py measures the choice."""

from __future__ import annotations

import asyncio

import httpx

from gymflow.models.errors import ModelError, ModelTimeout, TransportFailure


def make_transport(max_connections: int) -> httpx.AsyncBaseTransport:
    """httpx over aiohttp: httpx's own pool degrades under concurrency (see bench/transport.py)."""
    from httpx_aiohttp import AiohttpTransport

    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return AiohttpTransport(limits=limits)


def transport_failure(exc: BaseException) -> ModelError:
    """A timeout or a transport error, decided by the original exception.

    httpx-aiohttp maps every aiohttp connection error, a server hanging up included, to
    `httpx.ConnectTimeout`; the aiohttp exception it chains says what really happened."""
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    timed_out = isinstance(cause, asyncio.TimeoutError | TimeoutError) or (
        cause is exc and isinstance(exc, httpx.TimeoutException)
    )
    message = f"{type(cause).__name__}: {cause}"
    if timed_out:
        return ModelTimeout(message)
    return TransportFailure(message)
