"""`workspace_tests`: a workspace task is judged by its own tests/test.sh, run in the task's
sandbox after the agent (gymflow.environments.workspace.resources), never from stored text. This
registration names that verifier (its version, its bound) for the run's records; asked to judge a
stored rollout (a reverify), it says why it cannot."""

from __future__ import annotations

from gymflow.verifiers.base import VerifierError, VerifyInput, verifier


@verifier("workspace_tests")
def workspace_tests(inp: VerifyInput, params: object) -> None:
    raise VerifierError(
        "a workspace task is judged by running its tests/test.sh on the live workspace, "
        "which a stored rollout does not hold",
        kind="needs_workspace",
    )
