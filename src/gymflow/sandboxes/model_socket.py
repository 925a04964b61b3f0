"""The host's end of a sandbox's one way out: a unix socket that leads to the model server.

A sandbox without a network namespace of its own could reach anything on the host; with one
(`--unshare-net`) it reaches nothing. Between the two, the host listens on a unix socket in the
sandbox's scratch folder, bound into the sandbox, and carries each connection to the model
server's host and port; inside, `model_bridge.py` carries the agent's TCP connections to it. So
the agent sees an ordinary http://127.0.0.1:PORT/v1 endpoint, and nothing else is reachable."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from urllib.parse import urlsplit

from gymflow.sandboxes.base import SandboxError

#: The port the model answers on inside a sandbox (its own network namespace: no clash).
INSIDE_PORT = 8765


def inside_url(base_url: str, port: int = INSIDE_PORT) -> str:
    """`base_url` as a command inside the sandbox names it: the same path on 127.0.0.1:port."""
    parts = urlsplit(base_url)
    return parts._replace(netloc=f"127.0.0.1:{port}").geturl()


class ModelSocket:
    """Listens on `path` and carries each connection to the host and port of `base_url`."""

    def __init__(self, path: Path, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise SandboxError(f"the model endpoint must be an http URL on this host: {base_url}")
        self.path = path
        self.host, self.port = parts.hostname, parts.port or 80
        self._server: asyncio.AbstractServer | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Listen; the socket is ours alone until the sandbox lends it to its command's user."""
        self._server = await asyncio.start_unix_server(self._connect, path=str(self.path))
        self.path.chmod(0o600)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.ensure_future(_pump(source, sink))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            sink.close()
