"""A server on 127.0.0.1 that answers every request 500 and keeps its Authorization header: the
attacker's endpoint, to show which credentials a command sent where."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Recorder:
    url: str
    #: the Authorization header of every request received ("" when none)
    received: list[str] = field(default_factory=list)


@contextmanager
def recording_server() -> Iterator[Recorder]:
    recorder = Recorder(url="")

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            recorder.received.append(self.headers.get("authorization", ""))
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST = _record

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
