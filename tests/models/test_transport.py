"""The model client's own HTTP/1.1 layer against servers that answer byte for byte as a test says:
every way HTTP/1.1 ends an answer, compressed answers, interim answers, connection reuse and its
end, https with a checked certificate, and each timeout as a `timeout`, never a reward."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gymflow.core.config import ModelConfig, Sampling
from gymflow.core.errors import UserError
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import output_text, user_message
from gymflow.models.transport import JsonPoster

ANSWER = orjson.dumps(
    {
        "id": "resp_1",
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Answer: 42"}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
)

#: Given the request's raw bytes (head and body), what to write back, and whether to close after.
Answering = Callable[[bytes], tuple[bytes, bool]]


def _answer(body: bytes = ANSWER, *, status: str = "200 OK", headers: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}"
    return head.encode() + b"\r\n" + body


def _sized(body: bytes = ANSWER, extra: str = "") -> bytes:
    return _answer(body, headers=f"content-length: {len(body)}\r\n{extra}")


class _Wire:
    """A raw HTTP/1.1 server: reads each request whole (by its Content-Length), answers it as
    `answering` says; counts connections and requests."""

    def __init__(self, answering: Answering) -> None:
        self.answering = answering
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                reply, close = self.answering(request)
                writer.write(reply)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def _serving(
    answering: Answering, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[str, _Wire]]:
    wire = _Wire(answering)
    server = await asyncio.start_server(wire.handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://localhost:{port}/v1", wire
    finally:
        server.close()


def _calls(answering: Answering, count: int = 1, **model) -> tuple[list[CallOutcome], _Wire]:
    """`count` calls one after another through one client; the outcomes and the server's view."""

    async def go() -> tuple[list[CallOutcome], _Wire]:
        async with _serving(answering) as (base_url, wire):
            config = ModelConfig.model_validate(
                {"kind": "responses", "base_url": base_url, "max_retries": 0, **model}
            )
            async with ResponsesClient(config, base_url, Sampling()) as client:
                outcomes = [
                    await client.create([user_message("hi")], tools=None, call_index=0, seed=0)
                    for _ in range(count)
                ]
            return outcomes, wire

    return asyncio.run(asyncio.wait_for(go(), timeout=60))


def _read_whole(outcome: CallOutcome) -> None:
    assert outcome.error is None, outcome.error
    assert output_text(outcome.response["output"]) == "Answer: 42"
    assert outcome.calls[0].response == ANSWER.decode()


def test_a_content_length_answer_is_read_and_the_connection_reused() -> None:
    outcomes, wire = _calls(lambda _: (_sized(), False), count=3)
    for outcome in outcomes:
        _read_whole(outcome)
    assert (wire.connections, len(wire.requests)) == (1, 3)
    head = wire.requests[0].split(b"\r\n\r\n")[0].decode().lower().split("\r\n")
    assert head[0] == "post /v1/responses http/1.1"
    assert {"content-type: application/json", "accept-encoding: gzip, deflate"} <= set(head)
    assert any(line.startswith("host: localhost:") for line in head)


def test_a_chunked_answer_is_read_whole() -> None:
    half = len(ANSWER) // 2
    chunks = b"".join(
        b"%x\r\n%b\r\n" % (len(part), part) for part in (ANSWER[:half], ANSWER[half:])
    )
    reply = _answer(chunks + b"0\r\n\r\n", headers="transfer-encoding: chunked\r\n")
    outcomes, wire = _calls(lambda _: (reply, False), count=2)
    for outcome in outcomes:
        _read_whole(outcome)
    assert wire.connections == 1


def test_an_answer_ended_by_closing_the_connection_is_read_whole() -> None:
    reply = _answer(ANSWER, headers="connection: close\r\n")
    outcomes, wire = _calls(lambda _: (reply, True), count=2)
    for outcome in outcomes:
        _read_whole(outcome)
    assert wire.connections == 2  # the server closed each: a new one for the next call


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        # raw deflate, without zlib's wrapper, as some servers send it
        ("deflate", lambda data: zlib.compress(data)[2:-4]),
    ],
)
def test_compressed_answers_are_read_as_sent(encoding, compress) -> None:
    reply = _sized(compress(ANSWER), f"content-encoding: {encoding}\r\n")
    (outcome,), _ = _calls(lambda _: (reply, False))
    _read_whole(outcome)


def test_a_gzip_bomb_costs_the_bound_not_its_size() -> None:
    bomb = gzip.compress(b" " * (64 << 20))  # 64 MiB of spaces in about 64 KB
    reply = _sized(bomb, "content-encoding: gzip\r\n")
    (outcome,), _ = _calls(lambda _: (reply, False), max_response_bytes=1 << 20)
    assert outcome.error is not None and outcome.error.kind == "response_too_large"
    assert "passed 1,048,576 bytes" in str(outcome.error)


def test_a_corrupt_compressed_answer_is_a_transport_error() -> None:
    reply = _sized(b"\x1f\x8bnot gzip at all", "content-encoding: gzip\r\n")
    (outcome,), _ = _calls(lambda _: (reply, False))
    assert outcome.error is not None and outcome.error.kind == "transport_error"


def test_an_interim_answer_is_skipped() -> None:
    reply = b"HTTP/1.1 100 Continue\r\n\r\n" + _sized()
    (outcome,), _ = _calls(lambda _: (reply, False))
    _read_whole(outcome)


def test_an_error_status_keeps_its_headers_and_kind() -> None:
    body = b'{"error": {"message": "slow down"}}'
    reply = _answer(body, status="429 Too Many Requests", headers=(
        f"content-length: {len(body)}\r\nRetry-After: 0\r\n"
    ))  # fmt: skip
    (outcome,), wire = _calls(lambda _: (reply, False), max_retries=1)
    assert [call.failure_kind for call in outcome.calls] == ["rate_limited", "rate_limited"]
    assert [call.http_status for call in outcome.calls] == [429, 429]
    assert len(wire.requests) == 2


def test_a_server_that_stops_mid_answer_is_a_transport_error() -> None:
    reply = _answer(ANSWER[:10], headers="content-length: 4096\r\n")
    (outcome,), _ = _calls(lambda _: (reply, True))
    assert outcome.error is not None and outcome.error.kind == "transport_error"
    assert "mid-answer" in str(outcome.error)


def test_a_head_without_end_costs_its_bound_not_memory() -> None:
    endless = b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"a" * (1 << 20)
    (outcome,), _ = _calls(lambda _: (endless, False))
    assert outcome.error is not None and outcome.error.kind == "response_too_large"
    assert "head passed 65,536 bytes" in str(outcome.error)


def test_garbage_instead_of_http_is_a_transport_error() -> None:
    (outcome,), _ = _calls(lambda _: (b"SSH-2.0-OpenSSH_9.6\r\n", True))
    assert outcome.error is not None and outcome.error.kind == "transport_error"


def test_a_silent_server_is_a_read_timeout_then_a_total_one() -> None:
    def stall(_: bytes) -> tuple[bytes, bool]:
        return b"HTTP/1.1 200 OK\r\ncontent-length: 4096\r\n\r\n{", False

    (outcome,), _ = _calls(stall, timeout_s=5.0, read_timeout_s=0.3)
    assert outcome.error is not None and outcome.error.kind == "timeout"
    assert "read_timeout_s" in str(outcome.error) and outcome.calls[0].latency_s < 4
    (outcome,), _ = _calls(stall, timeout_s=0.3)
    assert outcome.error is not None and outcome.error.kind == "timeout"
    assert "within 0.3s" in str(outcome.error)


def test_a_refused_connection_is_a_transport_error() -> None:
    async def go() -> CallOutcome:
        async with _serving(lambda _: (_sized(), False)) as (base_url, _):
            pass  # closed again: nothing listens there now
        config = ModelConfig(kind="responses", base_url=base_url, max_retries=0)
        async with ResponsesClient(config, base_url, Sampling()) as client:
            return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    outcome = asyncio.run(go())
    assert outcome.error is not None and outcome.error.kind == "transport_error"
    assert "cannot connect to localhost" in str(outcome.error)


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(UserError, match="'authorization'") as raised:
        JsonPoster(
            "http://127.0.0.1:9/v1/responses",
            {"authorization": "Bearer key\r\nx-injected: 1"},
            max_connections=1,
            timeout_s=1.0,
        )
    assert "key" not in str(raised.value).replace("'authorization'", "")


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost; its PEM file and its key's."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def _over_tls(cert_file: Path, key_file: Path) -> CallOutcome:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert_file, key_file)

    async def go() -> CallOutcome:
        async with _serving(lambda _: (_sized(), False), tls) as (base_url, _):
            config = ModelConfig(kind="responses", base_url=base_url, max_retries=0)
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    return asyncio.run(asyncio.wait_for(go(), timeout=60))


def test_https_checks_the_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert_file, key_file = _certificate(tmp_path)
    # not trusted: the system's CAs never signed it
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    outcome = _over_tls(cert_file, key_file)
    assert outcome.error is not None and outcome.error.kind == "transport_error"
    assert "CERTIFICATE_VERIFY_FAILED" in str(outcome.error)
    # trusted as OpenSSL's default CA file: the answer comes over TLS
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    _read_whole(_over_tls(cert_file, key_file))
