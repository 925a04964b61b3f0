"""The model client's HTTP layer: POSTs of JSON bodies to one URL over kept-alive HTTP/1.1
connections, each answer read up to a bound.

Not aiohttp's `ClientSession`: per request it builds a `ClientRequest`, a URL, a header multidict,
a timer context and a write task, and py-spy put 44% of the collector's event-loop time in that
machinery (bench/RESULTS.md, h/perf3). Here a connection is an asyncio Protocol; a request is one
write of a head encoded once per poster (request line, host, the client's headers) with the body's
length and the body; the answer is parsed by httptools (llhttp, in C: uvicorn's own parser), and
one timer per request bounds it.

What it keeps of an HTTP client: https (the system's CAs, the host name checked), connection reuse
(the most recently used idle connection first; closed when the server says so or an answer went
wrong), at most `max_connections` open, Content-Length, chunked and until-close answers, gzip and
deflate answers (Accept-Encoding names only those), interim 1xx answers skipped, redirects not
followed (a 3xx is the answer), host names resolved once per DNS_TTL_S. No proxy: the environment's
proxy settings were not read before either (aiohttp's `trust_env` is off unless asked for). No
cookies: aiohttp's session sent a server's cookies back; a model API's answers do not depend on
them, and a load balancer's sticky cookie would have pinned every rollout to one backend.

Failures come out as the model failure kinds they mean, so the client never has to guess what a
library's exception says about the server. An answer is counted as it arrives, after
decompression, and reading stops at `max_bytes` (a `Content-Length` above it stops it before the
body): a 50 MB answer or a gzip bomb costs the bound, not its size."""

from __future__ import annotations

import asyncio
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

from gymflow.core.errors import UserError
from gymflow.models.errors import ModelError, ModelTimeout, ResponseTooLarge, TransportFailure

#: How much of an answer over the bound is kept as the call's evidence.
EVIDENCE_HEAD_BYTES = 2048
#: How long a host name's addresses are reused before they are looked up again.
DNS_TTL_S = 300.0
#: Longest status line and headers read before the answer's head must have ended (aiohttp's
#: limits are 8 KiB a line): a server that sends headers without end costs this, not memory.
MAX_HEAD_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: bytes


class _Answer:
    """The answer being read: its status, headers, body so far and decoder."""

    __slots__ = ("chunks", "decoder", "encoding", "headers", "size", "status", "until_close")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.size = 0
        self.decoder: zlib._Decompress | None = None
        self.until_close = False
        self.encoding = ""

    def body(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one exchange at a time, its answer handed to `waiter`."""

    def __init__(self, poster: JsonPoster, loop: asyncio.AbstractEventLoop) -> None:
        self._poster = poster
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport  # set as the connection is made
        self.reusable = False  # idle, open, and its last answer ended cleanly
        self._waiter: asyncio.Future[Reply] | None = None
        self._answer = _Answer()
        self._head_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._last_data = 0.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            # bytes nobody asked for: the connection is not ours to reuse
            self._close()
            return
        self._last_data = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # a bug in a callback: kept, not lost
            self._fail(TransportFailure(f"{type(exc.__context__).__name__}: {exc.__context__}"))
        except httptools.HttpParserError as exc:
            self._fail(TransportFailure(f"not an HTTP/1.1 answer: {exc}"))
        else:
            if not self._answer.status:  # the head has not ended yet
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._fail(
                        ResponseTooLarge(
                            f"the answer's head passed {MAX_HEAD_BYTES:,} bytes without ending; "
                            "reading stopped"
                        )
                    )

    def eof_received(self) -> bool:
        self.reusable = False
        return False  # close our side too; connection_lost settles the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._poster._forget(self)
        if self._waiter is None or self._waiter.done():
            return
        answer = self._answer
        if exc is None and answer.status >= 200 and answer.until_close:
            self.on_message_complete()  # an answer without a length ends with the connection
        elif exc is not None:
            self._fail(TransportFailure(f"{type(exc).__name__}: {exc}"))
        elif answer.status:
            self._fail(TransportFailure("the server closed the connection mid-answer"))
        else:
            self._fail(TransportFailure("the server closed the connection without answering"))

    # httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers = self._answer.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        answer = self._answer
        answer.status = self._parser.get_status_code()
        if answer.status < 200:
            return  # an interim answer (100 Continue): the real one follows
        headers, bound = answer.headers, self._poster.max_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > bound:
            self._fail(self._too_large(f"declares {int(declared):,} bytes"))
            return
        answer.until_close = declared is None and "chunked" not in headers.get(
            "transfer-encoding", ""
        )
        answer.encoding = headers.get("content-encoding", "").strip().lower()
        if answer.encoding in ("gzip", "x-gzip"):
            answer.decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def on_body(self, data: bytes) -> None:
        answer = self._answer
        if self._waiter is None or self._waiter.done():
            return
        room = self._poster.max_bytes - answer.size
        if answer.encoding == "deflate" and answer.decoder is None:
            # zlib-wrapped as the RFC says, or raw deflate as some servers send it
            wrapped = data[0] & 0x0F == 8
            answer.decoder = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        if answer.decoder is not None:
            try:
                # at most one byte past the room: enough to know the bound was passed
                data = answer.decoder.decompress(data, room + 1)
            except zlib.error as exc:
                self._fail(TransportFailure(f"the {answer.encoding} answer is corrupt: {exc}"))
                return
        answer.size += len(data)
        if answer.size > self._poster.max_bytes:
            answer.chunks.append(data)
            self._fail(self._too_large(f"passed {self._poster.max_bytes:,} bytes"))
            return
        answer.chunks.append(data)

    def on_message_complete(self) -> None:
        answer, waiter = self._answer, self._waiter
        if waiter is None or waiter.done():
            return
        if answer.status < 200:
            self._answer = _Answer()
            return
        if answer.decoder is not None:
            rest = answer.decoder.flush()
            if rest:
                answer.size += len(rest)
                answer.chunks.append(rest)
                if answer.size > self._poster.max_bytes:
                    self._fail(self._too_large(f"passed {self._poster.max_bytes:,} bytes"))
                    return
        self._settle()
        self.reusable = self._parser.should_keep_alive() and not self.transport.is_closing()
        waiter.set_result(Reply(answer.status, answer.headers, answer.body()))

    # one exchange

    def send(self, head: bytes, content: bytes, deadline: float) -> asyncio.Future[Reply]:
        """Write the request; the future holds its answer or its ModelError."""
        self.reusable = False
        self._answer = _Answer()
        self._head_bytes = 0
        self._waiter = waiter = self._loop.create_future()
        self._deadline = deadline
        self._last_data = self._loop.time()
        self._timer = self._loop.call_at(self._next_check(), self._check_time)
        self.transport.write(b"%b%d\r\n\r\n%b" % (head, len(content), content))
        return waiter

    def _next_check(self) -> float:
        read = self._poster.read_timeout_s
        return self._deadline if read is None else min(self._deadline, self._last_data + read)

    def _check_time(self) -> None:
        now = self._loop.time()
        read = self._poster.read_timeout_s
        if now >= self._deadline:
            self._fail(ModelTimeout(f"no complete answer within {self._poster.timeout_s:g}s"))
        elif read is not None and now - self._last_data >= read:
            self._fail(ModelTimeout(f"no data from the server for {read:g}s (read_timeout_s)"))
        else:
            self._timer = self._loop.call_at(self._next_check(), self._check_time)

    def _too_large(self, what: str) -> ResponseTooLarge:
        answer = self._answer
        return ResponseTooLarge(
            f"HTTP {answer.status} answer {what}, over the bound of {self._poster.max_bytes:,} "
            "(model.max_response_bytes); reading stopped",
            http_status=answer.status,
            head=_head(answer.chunks),
        )

    def _settle(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, error: ModelError) -> None:
        """End the exchange with `error`; the connection is closed, never drained."""
        self._settle()
        self._close()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _close(self) -> None:
        self.reusable = False
        self.transport.abort()

    def abandon(self) -> None:
        """The caller stopped waiting (cancelled): the answer may still come, so close."""
        self._settle()
        self._close()


class JsonPoster:
    """POSTs bodies to one URL over at most `max_connections` kept-alive connections.

    `timeout_s` bounds the whole exchange (connecting, sending, reading the answer);
    `connect_timeout_s` bounds connecting and `read_timeout_s` each wait for data."""

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
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        fields = {
            "host": parts.netloc.rpartition("@")[2],
            **{name.lower(): value for name, value in headers.items()},
            "accept-encoding": "gzip, deflate",
            "content-length": "",  # the body's length is written after it, per request
        }
        for name, value in fields.items():
            if any(c in f"{name}{value}" for c in "\r\n\0"):
                # never the value: it may be the API key
                raise UserError(f"HTTP header {name!r} holds a line break or NUL: not sent")
        lines = [f"POST {target} HTTP/1.1", *(f"{name}: {value}" for name, value in fields.items())]
        self._head = "\r\n".join(lines).encode()
        self._idle: list[_Connection] = []  # the most recently used last
        self._open: set[_Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._addresses: list[tuple] = []
        self._resolved_at = float("-inf")
        self._resolving = asyncio.Lock()  # one look-up for the connections opened at once
        self._tls_context: ssl.SSLContext | None = None

    async def post(self, content: bytes) -> Reply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        connection = await self._connection(loop, deadline)
        waiter = connection.send(self._head, content, deadline)
        try:
            return await waiter
        except asyncio.CancelledError:
            connection.abandon()
            raise
        finally:
            self._release(connection)

    async def aclose(self) -> None:
        for connection in list(self._open):
            connection.abandon()
        self._idle.clear()
        await asyncio.sleep(0)  # the transports' connection_lost callbacks

    # the pool

    async def _connection(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Connection:
        while True:
            while self._idle:
                connection = self._idle.pop()
                if connection.reusable and not connection.transport.is_closing():
                    return connection
            if len(self._open) + self._opening < self.max_connections:
                return await self._connect(loop, deadline)
            wake = loop.create_future()
            self._waiters.append(wake)
            try:
                async with asyncio.timeout_at(deadline):
                    await wake
            except TimeoutError:
                raise ModelTimeout(f"no connection free within {self.timeout_s:g}s") from None
            finally:
                if wake in self._waiters:
                    self._waiters.remove(wake)

    def _release(self, connection: _Connection) -> None:
        if connection.reusable:
            self._idle.append(connection)
        self._wake()

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            wake = self._waiters.popleft()
            if not wake.done():
                wake.set_result(None)
                return

    async def _connect(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Connection:
        self._opening += 1
        try:
            limit = deadline - loop.time()
            if self.connect_timeout_s is not None:
                limit = min(limit, self.connect_timeout_s)
            try:
                async with asyncio.timeout(limit):
                    connection = await self._open_connection(loop)
            except TimeoutError:
                if self.connect_timeout_s is not None and self.connect_timeout_s <= limit:
                    raise ModelTimeout(
                        f"could not connect to {self._host}:{self._port} within "
                        f"{self.connect_timeout_s:g}s (connect_timeout_s)"
                    ) from None
                raise ModelTimeout(f"no complete answer within {self.timeout_s:g}s") from None
            except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is one)
                raise TransportFailure(
                    f"cannot connect to {self._host}:{self._port}: {type(exc).__name__}: {exc}"
                ) from exc
        finally:
            self._opening -= 1
        self._open.add(connection)
        return connection

    async def _open_connection(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        """The first of the host's addresses that accepts a connection."""
        async with self._resolving:
            if loop.time() - self._resolved_at > DNS_TTL_S:
                infos = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
                self._addresses = [(family, address) for family, _, _, _, address in infos]
                self._resolved_at = loop.time()
        if self._tls and self._tls_context is None:
            self._tls_context = ssl.create_default_context()
        failure: OSError = OSError(f"no address for {self._host}")
        for family, address in self._addresses:
            try:
                _, connection = await loop.create_connection(
                    lambda: _Connection(self, loop),
                    host=address[0],
                    port=address[1],
                    family=family,
                    ssl=self._tls_context,
                    server_hostname=self._host if self._tls else None,
                )
                return connection
            except OSError as exc:
                failure = exc
        raise failure


def _head(chunks: list[bytes]) -> bytes:
    """The first EVIDENCE_HEAD_BYTES of `chunks`, without joining all of them."""
    head = bytearray()
    for chunk in chunks:
        head += chunk[: EVIDENCE_HEAD_BYTES - len(head)]
        if len(head) >= EVIDENCE_HEAD_BYTES:
            break
    return bytes(head)
