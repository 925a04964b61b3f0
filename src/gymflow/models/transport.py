"""The HTTP transport under the model client's httpx API, and what its errors mean.

httpx's own connection pool degrades as concurrency rises (a per-request scan of the pool), so the
client keeps httpx's API and sends through aiohttp. `AiohttpTransport` is gymflow's own thin
bridge: it reads each (small, JSON) answer whole instead of streaming it chunk by chunk through
httpx, and maps aiohttp's errors to the httpx exception that means the same thing, keeping the
original as the cause. bench/transport.py measures it against the alternatives."""

from __future__ import annotations

import asyncio

import aiohttp
import httpx

from gymflow.models.errors import ModelError, ModelTimeout, TransportFailure


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends through one aiohttp session with `max_connections`."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running event loop, as aiohttp requires.
        connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300)
        return aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None:
            self._session = self._open()
        timeout = request.extensions.get("timeout", {})
        limits = aiohttp.ClientTimeout(
            sock_connect=timeout.get("connect"),
            sock_read=timeout.get("read"),
            connect=timeout.get("pool"),
        )
        try:
            async with self._session.request(
                request.method,
                str(request.url),
                # Raw header bytes decoded once here: httpx's str views re-detect the encoding
                # on every access.
                headers=[
                    (k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                ],
                data=request.content or None,
                allow_redirects=False,
                timeout=limits,
            ) as reply:
                body = await reply.read()
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientPayloadError as exc:
            raise httpx.ReadError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        return httpx.Response(
            reply.status,
            headers=reply.raw_headers,
            content=body,
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def make_transport(max_connections: int) -> httpx.AsyncBaseTransport:
    """The transport the model client uses (chosen by bench/transport.py)."""
    return AiohttpTransport(max_connections)


def transport_failure(exc: BaseException) -> ModelError:
    """A timeout or a transport error, decided by the original exception.

    Some bridges (httpx-aiohttp among them) map every aiohttp connection error, a server hanging
    up included, to `httpx.ConnectTimeout`; the exception they chain says what really happened."""
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
