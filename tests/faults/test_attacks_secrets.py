"""Secrets in spellings the first hardening missed: a key in a URL's query (Google's `?key=`,
`?api_key=`, `#access_token=`) and an upper-case key id given as `api_key_env` were stored in
`runs.config_json` and shown in the report; a `\\u`-escaped key in the head kept of a
too-large answer was stored as evidence."""

from __future__ import annotations

import pytest
from aiohttp import web

from gymflow.core.config import ModelConfig, format_validation_error
from gymflow.models.client import REDACTED
from tests.models.conftest import one_call

SECRET = "SEKRIT0123456789abcdef"


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:8000/v1?api_key={SECRET}",
        f"https://generativelanguage.example.com/v1?key={SECRET}",
        f"http://127.0.0.1:8000/v1?api-version=1&access_token={SECRET}",
        f"http://127.0.0.1:8000/v1#token={SECRET}",
    ],
)
def test_a_key_in_a_url_query_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        ModelConfig(kind="responses", base_url=url)
    message = format_validation_error(refused.value, "eval.yaml")
    assert "must not carry credentials" in message and SECRET not in message


def test_a_query_without_credentials_is_kept() -> None:
    url = "https://x.example.com/openai/v1?api-version=2025-04-01-preview"
    assert ModelConfig(kind="responses", base_url=url).base_url == url


@pytest.mark.parametrize(
    "value", ["AKIAIOSFODNN7EXAMPLE", "github_pat_11ABCDEFG0abcdefXYZ1234567890"]
)
def test_an_upper_case_or_underscored_key_as_api_key_env_is_refused(value: str) -> None:
    with pytest.raises(ValueError) as refused:
        ModelConfig(api_key_env=value)
    message = format_validation_error(refused.value, "eval.yaml")
    assert "must name an environment variable" in message and value not in message


def test_a_unicode_escaped_key_in_a_too_large_answers_head_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunked answer past max_response_bytes keeps its first bytes as evidence; that head is
    not whole JSON, so the `\\uXXXX` check (which decoded the JSON) let an escaped key through."""
    key = "sk-test-0123456789abcdefSECRET"
    monkeypatch.setenv("GYMFLOW_SECRET_FOR_TEST", key)
    escaped = "".join(f"\\u{ord(c):04x}" for c in key)

    async def echo_then_pad(request: web.Request) -> web.StreamResponse:
        body = '{"error": {"message": "bad key: ' + escaped + '"}, "pad": "' + "x" * 100_000
        reply = web.StreamResponse(status=401, headers={"Content-Type": "application/json"})
        reply.enable_chunked_encoding()  # no Content-Length: the bound is met while reading
        await reply.prepare(request)
        for start in range(0, len(body), 1000):
            await reply.write(body[start : start + 1000].encode())
        await reply.write_eof()
        return reply

    (record,) = one_call(echo_then_pad, max_response_bytes=16_384).calls
    assert record.failure_kind == "response_too_large"
    kept = f"{record.response} {record.error}"
    assert escaped not in kept and key not in kept
    assert REDACTED in kept
