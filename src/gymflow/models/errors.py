"""Model failure kinds. Each is a distinct class and a distinct `kind` string in the store, so a
429 is never confused with a timeout or a malformed body."""

from __future__ import annotations


class ModelError(Exception):
    kind = "model_error"
    retryable = False

    def __init__(
        self, message: str, *, http_status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.retry_after = retry_after


class RateLimited(ModelError):
    kind = "rate_limited"
    retryable = True


class ServerError(ModelError):
    kind = "server_error"
    retryable = True


class ModelTimeout(ModelError):
    kind = "timeout"
    retryable = True


class TransportFailure(ModelError):
    """Connection refused or reset, DNS, TLS: the request may never have reached the server."""

    kind = "transport_error"
    retryable = True


class MalformedResponse(ModelError):
    """A body that is not JSON or not a Responses API object. Retried: often a proxy hiccup."""

    kind = "malformed_response"
    retryable = True


class ContextLengthExceeded(ModelError):
    kind = "context_length_exceeded"


class Refused(ModelError):
    """The server declined the request on content grounds."""

    kind = "refused"


class ClientRequestError(ModelError):
    """Any other 4xx: the request itself is wrong; retrying will not help."""

    kind = "client_error"


def classify_http_error(status: int, body: str, retry_after: float | None) -> ModelError:
    text = body[:500]
    lowered = text.lower()
    if status == 429:
        return RateLimited(f"HTTP 429: {text}", http_status=status, retry_after=retry_after)
    if status >= 500:
        return ServerError(f"HTTP {status}: {text}", http_status=status, retry_after=retry_after)
    if "context_length" in lowered or "maximum context" in lowered or "too many tokens" in lowered:
        return ContextLengthExceeded(f"HTTP {status}: {text}", http_status=status)
    if "content_policy" in lowered or "refus" in lowered or "safety" in lowered:
        return Refused(f"HTTP {status}: {text}", http_status=status)
    return ClientRequestError(f"HTTP {status}: {text}", http_status=status)
