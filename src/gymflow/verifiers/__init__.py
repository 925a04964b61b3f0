"""Reward functions with versioned parameters (`base`), the built-ins, the worker pool that runs
one with a bound (`pool`), the sandbox for code, and which code a verifier ran (`identity`).
Importing this package registers the built-ins.

Cut-off: judges one answer from its input; reads no store. Tier 1, beside `models` and
`store`."""

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

__tier__ = 1

__all__ = [
    "VERIFIERS",
    "Verdict",
    "VerifierError",
    "VerifierSpec",
    "VerifyInput",
    "base",
    "get_verifier",
    "identity",
    "ifeval",
    "pool",
    "verifier",
]
