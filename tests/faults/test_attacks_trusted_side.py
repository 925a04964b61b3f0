"""Model code attacking the trusted side of the sandbox rather than the sandbox: what it hands back
is rebuilt here, so a value cheap to build in the sandbox and costly to build here (a set of
int subclasses with distinct hashes there, plain ints that all hash alike here: O(N^2)) outlived
the verifier's bound and became `verifier_timeout`, left out of every score, and a bomb in
place of a wrong answer raised pass@1 from 95% to 100%. Each is now the wrong answer it is:
verified, reward 0, with its reason. Also: an honest value nested 150 deep was `tampering` (the
two sides counted depth apart), and memory held as files (memfd) escaped the memory limit."""

from __future__ import annotations

import os

import pytest

from gymflow.core.statuses import VERIFIED
from gymflow.environments.registry import load_environment
from gymflow.verifiers import sandbox_host
from gymflow.verifiers.base import VerifyInput
from gymflow.verifiers.pool import WorkerTimeout
from tests.conftest import require_tool
from tests.faults.test_forgery import answer, our_scratch

#: 40,000 members: 55 s to build here before the fix, past the sandbox's 3 s here.
COLLIDING_SET = """
M = (1 << 61) - 1
return {Distinct(M * k) for k in range(1, 40_000)}
"""
DISTINCT = """
class Distinct(int):
    def __hash__(self):
        return id(self)
"""
DEEP_DICT = """
d = 1
for _ in range(150):
    d = {"k": d}
return d
"""
#: 900 MiB held as memory files by one process under a 256 MiB limit (no address space used).
MEMFD = """
import os
fds = []
for _ in range(56):
    fds.append(os.memfd_create("x"))
    os.write(fds[-1], b"x" * (16 << 20))
return False
"""


@pytest.fixture(scope="module")
def env():
    return load_environment("humaneval")


def _score(verifications) -> float:
    """pass@1 as every score counts it: over the verified rollouts."""
    judged = [v for v in verifications if v.status == VERIFIED]
    return sum(bool(v.passed) for v in judged) / len(judged)


def test_a_value_costly_to_build_here_is_a_wrong_answer_counted_in_the_score(env) -> None:
    """Five reference answers and a bomb through the worker pool (the collector's and reverify's
    path): 5 of 6, as with an honest wrong answer, never 5 of 5."""
    require_tool("bwrap")
    server = env.resources_server({"timeout_s": 3.0})
    tasks = env.tasks("test")[:6]
    inputs = [VerifyInput(task, task.reference) for task in tasks[1:]]
    inputs.append(VerifyInput(tasks[0], answer(tasks[0], DISTINCT, COLLIDING_SET)))
    verifications = server.verify_many(inputs)
    bomb = verifications[-1]
    assert (bomb.status, bomb.reward, bomb.passed) == (VERIFIED, 0.0, False), bomb
    assert (bomb.details["reason"], bomb.details["limit"]) == ("timeout", "wall_clock")
    assert _score(verifications) == pytest.approx(5 / 6)
    assert our_scratch() == set()


def test_an_answer_that_outlives_the_verifiers_bound_is_failing_not_excluded(env) -> None:
    """Whatever else makes a code verification outlive its bound (trusted tests comparing a
    costly value), the answer's code caused it: a failed answer with its reason."""
    server = env.resources_server()
    verification = server._bounded_failure(WorkerTimeout("no verdict within 300s"))
    assert (verification.status, verification.reward, verification.passed) == (
        VERIFIED,
        0.0,
        False,
    )
    assert verification.details["reason"] == "timeout"
    assert verification.details["limit"] == "verifier_timeout_s"


def test_an_honest_value_nested_150_deep_is_judged_on_its_value(env) -> None:
    require_tool("bwrap")
    task = env.tasks("test")[0]
    verification = env.resources_server().verify_sync(
        VerifyInput(task, answer(task, "", DEEP_DICT))
    )
    assert verification.status == VERIFIED, verification
    assert verification.failure_kind is None, verification.details
    assert verification.details["reason"] == "tests_failed", verification.details


def test_memory_held_as_files_counts_within_the_memory_limit(env) -> None:
    require_tool("bwrap")
    if sandbox_host.memory_cgroups() is None:
        pytest.skip("no memory cgroup can be made here: the address-space limit alone applies")
    task = env.tasks("test")[0]
    server = env.resources_server({"timeout_s": 10.0, "memory_mb": 256})
    verification = server.verify_sync(VerifyInput(task, answer(task, "", MEMFD)))
    assert (verification.status, verification.reward) == (VERIFIED, 0.0), verification
    assert verification.details["reason"] == "memory", verification.details
    assert our_scratch() == set()
    ours = f"{sandbox_host.SCRATCH_PREFIX}{os.getpid()}-*"
    assert not list(sandbox_host.memory_cgroups().root.glob(ours))
