"""Candidate code attacking what the sandbox hands back rather than the verdict: text the
runner's JSON carries as `\\ud800` decodes to a lone surrogate, which the store refuses. A
candidate raising ValueError('\\ud800') stopped `gym eval reverify` with a TypeError; its
rollout is now a plain runtime error, stored. Also checked here: techniques the forgery corpus
lacks, each a failed verification."""

from __future__ import annotations

import orjson
import pytest

from gymflow.core.statuses import VERIFIED
from gymflow.environments.registry import load_environment
from gymflow.verifiers.base import VerifyInput
from tests.conftest import require_tool
from tests.faults.test_forgery import WRONG, answer, our_scratch

TECHNIQUES = {
    # text the store cannot hold, in every place the runner reports text
    "surrogate_in_exception_message": ("", "raise ValueError('\\ud800' * 3)", "runtime_error"),
    "surrogate_in_exception_type": (
        "",
        "E = type('\\udfffError', (Exception,), {})\nraise E('x')",
        "runtime_error",
    ),
    "surrogate_returned": ("", "return '\\ud800'", "tests_failed"),
    # frames by an API the corpus does not use
    "current_frames": ("import sys\nF = sys._current_frames()", WRONG, "tampering"),
    # the runner's memory map, a step towards reading its token from /proc/self/mem
    "proc_self_maps": ("m = open('/proc/self/maps').read()", WRONG, "tampering"),
    # an integer past what the runner's JSON writer can print
    "huge_integer": ("", "return 10**100000", "unsupported_value"),
}


@pytest.fixture(scope="module")
def server_and_task():
    env = load_environment("humaneval")
    return env.resources_server({"timeout_s": 3.0}), env.tasks("test")[0]


@pytest.mark.parametrize("name", sorted(TECHNIQUES))
def test_each_attack_is_a_failed_verification_that_can_be_stored(name, server_and_task) -> None:
    require_tool("bwrap")
    server, task = server_and_task
    prelude, body, reason = TECHNIQUES[name]
    verification = server.verify_sync(VerifyInput(task, answer(task, prelude, body)))
    assert verification.status == VERIFIED, verification
    assert (verification.reward, verification.passed) == (0.0, False), verification.details
    assert verification.details["reason"] == reason, verification.details
    orjson.dumps(verification.details)  # what the store writes: refuses lone surrogates
    assert our_scratch() == set()
