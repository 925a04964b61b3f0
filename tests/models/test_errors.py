"""Failure kinds read from real servers' error bodies."""

from __future__ import annotations

import pytest

from gymflow.models.errors import classify_failed_response, classify_http_error

OPENAI_CONTEXT = (
    '{"error": {"message": "This model\'s maximum context length is 8192 tokens.", '
    '"type": "invalid_request_error", "code": "context_length_exceeded"}}'
)
VLLM_CONTEXT = (
    '{"object": "error", "message": "This model\'s maximum context length is 4096 tokens. '
    'However, you requested 5000 tokens.", "type": "BadRequestError", "code": 400}'
)
POLICY = '{"error": {"message": "blocked", "code": "content_policy_violation"}}'


@pytest.mark.parametrize(
    ("status", "body", "kind", "retryable"),
    [
        (429, "{}", "rate_limited", True),
        (408, "<html>408 Request Time-out</html>", "timeout", True),
        (503, "upstream busy", "server_error", True),
        (400, OPENAI_CONTEXT, "context_length_exceeded", False),
        (400, VLLM_CONTEXT, "context_length_exceeded", False),
        (500, VLLM_CONTEXT, "context_length_exceeded", False),
        (400, POLICY, "refused", False),
        (401, '{"error": {"message": "bad key"}}', "client_error", False),
    ],
)
def test_http_errors(status: int, body: str, kind: str, retryable: bool) -> None:
    error = classify_http_error(status, body, retry_after=None)
    assert (error.kind, error.retryable, error.http_status) == (kind, retryable, status)


def test_failed_responses_by_code() -> None:
    assert classify_failed_response({"code": "rate_limit_exceeded"}, 200).kind == "rate_limited"
    assert classify_failed_response({"code": "server_error"}, 200).kind == "server_error"
    assert classify_failed_response(None, 200).kind == "server_error"
