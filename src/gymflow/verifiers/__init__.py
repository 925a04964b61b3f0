"""Reward functions with versioned parameters. Importing this package registers the built-ins."""

from gymflow.verifiers import (  # noqa: F401
    bfcl,
    code_exec,
    ifeval,
    match,
    math_answer,
    math_judge,
    nemo_gym,
    numeric,
    state_match,
    workspace_tests,
)
from gymflow.verifiers.base import (
    VERIFIERS,
    Verdict,
    VerifierError,
    VerifierSpec,
    VerifyInput,
    get_verifier,
    verifier,
)

__all__ = [
    "VERIFIERS",
    "Verdict",
    "VerifierError",
    "VerifierSpec",
    "VerifyInput",
    "get_verifier",
    "verifier",
]
