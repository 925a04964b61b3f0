"""What a model server reports about itself (llama.cpp's /props, vLLM's /version, /v1/models):
kept as a run's factor, without the chat template's text or anything beyond identification."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gymflow.models.server_info import server_report
from tests.conftest import free_port

ANSWERS = {
    "/props": {"model_path": "/models/gemma-3-270m.gguf", "chat_template": "{{ messages }}",
               "build_info": "b6000", "api_key": "sk-never-kept"},
    "/version": {"version": "0.9.2"},
    "/v1/models": {"object": "list", "data": [{"id": "gemma-3-270m", "owned_by": "me",
                                                "max_model_len": 2048, "secret": "x"}]},
}  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = ANSWERS.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        if body:
            self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args) -> None:
        pass


def test_a_server_reports_its_model_and_version() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        report = server_report(f"http://127.0.0.1:{server.server_port}/v1")
    finally:
        server.shutdown()
        server.server_close()
    assert report == {
        "props": {
            "model_path": "/models/gemma-3-270m.gguf",
            "build_info": "b6000",
            "chat_template_sha256": hashlib.sha256(b"{{ messages }}").hexdigest()[:12],
        },
        "version": "0.9.2",
        "models": [{"id": "gemma-3-270m", "owned_by": "me", "max_model_len": 2048}],
    }
    assert "sk-never-kept" not in json.dumps(report)


def test_a_server_that_answers_nothing_reports_nothing() -> None:
    assert server_report(f"http://127.0.0.1:{free_port()}/v1", timeout=0.5) == {}
