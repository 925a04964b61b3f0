"""Every fault the local policy server injects reaches the store as its own failure kind, for both
server kinds; retries stop at the bound; Retry-After and the request spacing are honoured."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from gymflow.core.config import ModelConfig, Sampling
from gymflow.models.client import CallOutcome, ResponsesClient, retry_after_s
from gymflow.models.errors import RateLimited, ServerError
from gymflow.models.rate_limit import RequestSpacer
from gymflow.models.responses import user_message
from gymflow.simulated.local_server import LocalPolicyServer, free_port
from gymflow.simulated.policy import PolicyEntry
from tests.models.conftest import ledger_prompts

KINDS = ("responses", "chat_completions")


@pytest.fixture(scope="module")
def policy(ledger_table: dict[str, PolicyEntry]) -> Iterator[LocalPolicyServer]:
    with LocalPolicyServer(ledger_table, seed=0) as server:
        yield server


def _schedule(server: LocalPolicyServer, *faults: str) -> None:
    url = f"http://127.0.0.1:{server.port}/_gymflow/faults"
    httpx.post(url, json={"schedule": list(faults)}).raise_for_status()


def _create(server: LocalPolicyServer, prompt: str, *, sampling=None, **model) -> CallOutcome:
    config = ModelConfig.model_validate(
        {"kind": "responses", "base_url": server.base_url, "backoff_s": 0.0, **model}
    )

    async def call() -> CallOutcome:
        async with ResponsesClient(config, server.base_url, sampling or Sampling()) as client:
            return await client.create([user_message(prompt)], tools=None, call_index=0, seed=5)

    return asyncio.run(call())


FAULTS = [
    ("429", "rate_limited", 429),
    ("500", "server_error", 500),
    ("malformed", "malformed_response", 200),
    ("context_length", "context_length_exceeded", 400),
    ("refused", "refused", 200),
    ("reset", "transport_error", None),  # the answer never completed
    ("timeout", "timeout", None),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("fault", "failure_kind", "http_status"), FAULTS)
def test_each_fault_is_its_own_failure_kind(
    policy, ledger, kind, fault, failure_kind, http_status
) -> None:
    _schedule(policy, fault)
    outcome = _create(policy, ledger_prompts(ledger)[0], kind=kind, max_retries=0, timeout_s=1.0)
    (call,) = outcome.calls
    assert outcome.error is not None and outcome.error.kind == failure_kind
    assert (call.status, call.failure_kind, call.http_status) == (
        "error",
        failure_kind,
        http_status,
    )
    assert call.error and call.attempt == 0 and call.latency_s > 0
    assert outcome.response is None


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_output_is_recorded_as_incomplete(policy, kind) -> None:
    _schedule(policy, "truncated")
    outcome = _create(policy, "What is 2 + 2?", kind=kind)
    (call,) = outcome.calls
    assert outcome.error is None
    assert outcome.response["status"] == "incomplete"
    assert outcome.response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (call.status, call.failure_kind, call.http_status) == ("incomplete", None, 200)


@pytest.mark.parametrize("kind", KINDS)
def test_retries_stop_at_the_bound(policy, kind) -> None:
    _schedule(policy, "500", "reset", "429", "500", "ok")
    outcome = _create(policy, "What is 2 + 2?", kind=kind, max_retries=3)
    assert [c.attempt for c in outcome.calls] == [0, 1, 2, 3]
    assert [c.failure_kind for c in outcome.calls] == [
        "server_error",
        "transport_error",
        "rate_limited",
        "server_error",
    ]
    assert outcome.error.kind == "server_error" and outcome.response is None
    _schedule(policy)  # the unused "ok" must not leak into the next test


def test_a_retry_that_succeeds_clears_the_error(policy) -> None:
    _schedule(policy, "429", "malformed", "ok")
    outcome = _create(policy, "What is 2 + 2?", max_retries=2)
    assert [c.failure_kind for c in outcome.calls] == ["rate_limited", "malformed_response", None]
    assert outcome.error is None and outcome.calls[-1].status == "completed"


def test_non_retryable_kinds_are_not_retried(policy) -> None:
    _schedule(policy, "context_length", "refused")
    for kind in ("context_length_exceeded", "refused"):
        outcome = _create(policy, "What is 2 + 2?", max_retries=4)
        assert [c.failure_kind for c in outcome.calls] == [kind]


def test_evidence_sampling_and_usage(policy, ledger) -> None:
    sampling = Sampling(temperature=0.3, top_p=0.9, max_output_tokens=77, reasoning_effort="low")
    for kind in KINDS:
        outcome = _create(policy, ledger_prompts(ledger)[0], kind=kind, sampling=sampling)
        (call,) = outcome.calls
        sent = {"temperature": 0.3, "top_p": 0.9, "max_output_tokens": 77}
        # `seed` is a chat completions parameter, not a Responses API one (model.seed_in)
        seed = {"seed": 5} if kind == "chat_completions" else {}
        assert call.sampling == {**sent, **seed, "reasoning": {"effort": "low"}}
        if kind == "responses":
            assert call.reasoning_tokens > 0  # the chat path carries no reasoning summary tokens
        assert call.request["input"] == [user_message(ledger_prompts(ledger)[0])]
        assert call.input_tokens > 0 and call.output_tokens > 0 and call.cached_tokens == 0
        assert outcome.response["output"][0]["type"] == "reasoning"


def test_retry_after_is_read_and_honoured() -> None:
    assert retry_after_s(httpx.Headers({"retry-after": "2.5"})) == 2.5
    assert retry_after_s(httpx.Headers({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert retry_after_s(httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert retry_after_s(httpx.Headers({"retry-after": "soon"})) is None
    client = ResponsesClient(ModelConfig(backoff_s=1.0), "http://127.0.0.1:1/v1", Sampling())
    assert client.backoff(0, RateLimited("x", retry_after=7.0)) == 7.0
    assert client.backoff(0, RateLimited("x", retry_after=1e6)) == 120.0
    delays = [client.backoff(3, ServerError("x")) for _ in range(50)]
    assert all(4.0 <= d <= 8.0 for d in delays) and len(set(delays)) > 1  # jittered
    # the last of 20 retries waited 0.5 * 2**19 s (three days); now at most the cap, jittered
    last = [client.backoff(19, ServerError("x")) for _ in range(50)]
    assert all(60.0 <= d <= 120.0 for d in last) and len(set(last)) > 1
    asyncio.run(client.__aexit__())


def test_request_spacer_reserves_evenly_spaced_slots() -> None:
    spacer = RequestSpacer(requests_per_minute=1200)  # one slot every 50 ms

    async def burst() -> list[float]:
        return await asyncio.gather(*(spacer.wait() for _ in range(4)))

    started = time.monotonic()
    delays = asyncio.run(burst())
    assert delays[0] == 0.0
    assert [round(d / 0.05) for d in delays] == [0, 1, 2, 3]
    assert time.monotonic() - started >= 0.15 - 0.01


def test_read_timeout_is_a_timeout_and_a_refused_connection_is_transport(policy) -> None:
    _schedule(policy, "timeout")
    outcome = _create(policy, "What is 2 + 2?", max_retries=0, timeout_s=30.0, read_timeout_s=0.3)
    (call,) = outcome.calls
    # the read timeout, named as the setting, not the total
    assert call.failure_kind == "timeout" and "read_timeout_s" in call.error
    assert not call.error.startswith("no complete answer")

    closed = LocalPolicyServer({})  # never started: nothing listens on its port
    closed.port = free_port()
    refused = _create(closed, "hi", max_retries=1, connect_timeout_s=1.0)
    assert [c.failure_kind for c in refused.calls] == ["transport_error", "transport_error"]
    assert all(c.http_status is None for c in refused.calls)
