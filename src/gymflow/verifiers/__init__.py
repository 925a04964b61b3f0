"""Reward functions with versioned parameters. Importing this package registers the built-ins."""

from gymflow.verifiers import bfcl, code_exec, ifeval, numeric, state_match  # noqa: F401
from gymflow.verifiers.base import (
    REGISTRY,
    Verdict,
    VerifierError,
    VerifierSpec,
    VerifyInput,
    get_verifier,
    verifier,
)

__all__ = [
    "REGISTRY",
    "Verdict",
    "VerifierError",
    "VerifierSpec",
    "VerifyInput",
    "get_verifier",
    "verifier",
]
