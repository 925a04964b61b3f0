"""Model failure kinds. Each is a distinct class and a distinct `kind` string in the store, so a
429 is never confused with a timeout or a malformed body."""

from __future__ import annotations

from gymflow.core.errors import RuntimeFailure


class ModelError(RuntimeFailure):
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
    """A body that is not JSON, or JSON that does not fit the API's schema (`"text": 42`, content
    parts as strings). Retried: often a proxy hiccup. The body is kept as the call's evidence."""

    kind = "malformed_response"
    retryable = True


class ResponseNotRun(ModelError):
    """A well-formed Responses object for a response that did not run to an answer: `queued`,
    `in_progress` or `cancelled`, no output at all, or only reasoning with no message or function
    call. Never scored; retried, as a server that
    cancels under load or answers before it has run may answer the next attempt."""

    kind = "response_not_run"
    retryable = True


class ResponseTooLarge(ModelError):
    """An answer longer than `model.max_response_bytes`: reading stopped at the bound, so one
    hostile or runaway answer cannot take the collector's memory. Not retried: the same request
    would ask for the same answer."""

    kind = "response_too_large"

    def __init__(self, message: str, *, http_status: int | None = None, head: bytes = b"") -> None:
        super().__init__(message, http_status=http_status)
        self.head = head  # the answer's first bytes, kept as evidence


class ContextLengthExceeded(ModelError):
    kind = "context_length_exceeded"


class Refused(ModelError):
    """The server declined the request on content grounds."""

    kind = "refused"


class ClientRequestError(ModelError):
    """Any other 4xx: the request itself is wrong; retrying will not help."""

    kind = "client_error"


#: The kinds a new attempt may settle: the client retries them, and `--resume` runs them again.
RETRYABLE_KINDS = tuple(cls.kind for cls in ModelError.__subclasses__() if cls.retryable)

_CONTEXT_MARKERS = ("context_length", "maximum context", "context window", "too many tokens")
_REFUSAL_MARKERS = ("content_policy", "content_filter", "refus", "safety")


def classify_http_error(status: int, body: str, retry_after: float | None) -> ModelError:
    """The failure an HTTP error status means, read from the status, then the error's code
    (OpenAI, vLLM and SGLang all send `{"error": {"code": ...}}`), then its message."""
    text = body[:500]
    lowered = text.lower()
    if status == 429:
        return RateLimited(f"HTTP 429: {text}", http_status=status, retry_after=retry_after)
    if status == 408:  # a proxy (nginx, a cloud load balancer) gave up waiting: a timeout
        return ModelTimeout(f"HTTP 408: {text}", http_status=status, retry_after=retry_after)
    if any(marker in lowered for marker in _CONTEXT_MARKERS):
        return ContextLengthExceeded(f"HTTP {status}: {text}", http_status=status)
    if status >= 500:
        return ServerError(f"HTTP {status}: {text}", http_status=status, retry_after=retry_after)
    if any(marker in lowered for marker in _REFUSAL_MARKERS):
        return Refused(f"HTTP {status}: {text}", http_status=status)
    return ClientRequestError(f"HTTP {status}: {text}", http_status=status)


def classify_failed_response(error: dict | None, status: int) -> ModelError:
    """A 200 whose Responses object says `status: failed`: its error code says which failure."""
    code = str((error or {}).get("code") or "")
    message = f"response failed: {code or 'no code'}: {(error or {}).get('message', '')}"[:500]
    if "rate_limit" in code:
        return RateLimited(message, http_status=status)
    if any(marker in code for marker in _CONTEXT_MARKERS):
        return ContextLengthExceeded(message, http_status=status)
    if any(marker in code for marker in _REFUSAL_MARKERS):
        return Refused(message, http_status=status)
    return ServerError(message, http_status=status)
