"""Which code a verifier ran: a verifier version names its parameters (`name@params-hash`), and
this hash of the source file that defines its verify function is stored beside it, so `gym eval
reverify` can tell that the verifier changed under the same parameters and store a new version
(`name@params-hash+code-hash`) instead of answering "already stored"."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gymflow.verifiers.base import VerifierSpec


def code_hash(spec: VerifierSpec) -> str | None:
    """sha256 (8 hex digits) of the file defining `spec.fn`; None when it cannot be read."""
    try:
        source = Path(spec.fn.__code__.co_filename).read_bytes()
    except (AttributeError, OSError):
        return None
    return hashlib.sha256(source).hexdigest()[:8]


def with_code(version: str, code: str) -> str:
    """The version of a verifier whose code differs from the one its parameters' version ran."""
    return f"{version}+{code}"
