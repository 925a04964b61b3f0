"""The model client's HTTP layer: one aiohttp session that POSTs JSON and reads each answer up to
a bound.

aiohttp directly, not under httpx: bench/ceiling.py measured, at concurrency 64 on 127.0.0.1,
aiohttp at ~9,400 requests/s, httpx's own pool at ~120 (a per-request scan of the pool), and httpx
over an aiohttp transport at ~3,300: building httpx's Request and Response objects cost more than
aiohttp's whole request. Failures come out as the model failure kinds they mean, so the client
never has to guess what a library's exception says about the server.

An answer is read chunk by chunk and reading stops at `max_bytes` (a `Content-Length` above it
stops it before the first chunk): aiohttp reads the socket only as fast as we take chunks, and
(3.14) decompresses a gzip body at most a chunk at a time, so a 50 MB answer or a gzip bomb costs
the bound, not its size."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from gymflow.models.errors import ModelTimeout, ResponseTooLarge, TransportFailure

#: How much of an answer over the bound is kept as the call's evidence.
EVIDENCE_HEAD_BYTES = 2048


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes


class JsonPoster:
    """POSTs bodies to one URL through one aiohttp session with at most `max_connections`.

    `timeout_s` bounds the whole exchange (connecting, sending, reading the answer);
    `connect_timeout_s` and `read_timeout_s` bound connecting and each wait for data."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        max_connections: int,
        timeout_s: float,
        connect_timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        max_bytes: int = 1 << 62,
    ) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self.headers = dict(headers)
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(
            total=timeout_s, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running event loop, as aiohttp requires.
        connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300)
        return aiohttp.ClientSession(
            connector=connector,
            headers=self.headers,
            timeout=self._timeout,
            skip_auto_headers=("User-Agent",),
        )

    async def post(self, content: bytes) -> Reply:
        if self._session is None:
            self._session = self._open()
        try:
            async with self._session.post(self.url, data=content, allow_redirects=False) as reply:
                return Reply(reply.status, reply.headers, await self._read(reply))
        except (aiohttp.ServerTimeoutError, aiohttp.ConnectionTimeoutError) as exc:
            # A connect or read (`sock_read`) timeout: aiohttp's own subclasses of TimeoutError.
            raise ModelTimeout(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            raise ModelTimeout(f"no complete answer within {self.timeout_s:g}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc

    async def _read(self, reply: aiohttp.ClientResponse) -> bytes:
        """The body, or ResponseTooLarge as soon as it passes `max_bytes` (the connection is then
        closed, not drained). The same loop as aiohttp's own `read()`, plus the count."""
        declared = reply.content_length
        if declared is not None and declared > self.max_bytes:
            reply.close()
            raise self._too_large(reply, f"declares {declared:,} bytes", b"")
        chunks: list[bytes] = []
        size = 0
        while chunk := await reply.content.readany():
            size += len(chunk)
            if size > self.max_bytes:
                reply.close()
                head = _head(chunks or [chunk])
                raise self._too_large(reply, f"passed {self.max_bytes:,} bytes", head)
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_large(self, reply: aiohttp.ClientResponse, what: str, head: bytes) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"HTTP {reply.status} answer {what}, over the bound of {self.max_bytes:,} "
            "(model.max_response_bytes); reading stopped",
            http_status=reply.status,
            head=head,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _head(chunks: list[bytes]) -> bytes:
    """The first EVIDENCE_HEAD_BYTES of `chunks`, without joining all of them."""
    head = bytearray()
    for chunk in chunks:
        head += chunk[: EVIDENCE_HEAD_BYTES - len(head)]
        if len(head) >= EVIDENCE_HEAD_BYTES:
            break
    return bytes(head)
