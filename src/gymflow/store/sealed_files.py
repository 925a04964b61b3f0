"""Files gymflow keeps beside a run for its report (the regression gate's verdict, a
confirmation's outcome), sealed by this machine's key and bound to their place: a file anyone
can write beside a run made the report say "Regression gate passed, +18.0 points" and show an
experiment's outcome no experiment had (attack pass 5, s01). A file that is not sealed, sealed
for another place, or sealed by another key reads as absent.

The file stays the JSON object it was (`gate.json`'s `passed` and `checks` at its top), with one
more field, `gymflow_seal`: the MAC of its place and its other fields."""

from __future__ import annotations

import hmac
import json
from pathlib import Path
from typing import Any, cast

from gymflow.core.json_text import parse
from gymflow.core.written import write_text
from gymflow.store.seal import load_key

SEAL_FIELD = "gymflow_seal"


def _message(path: Path, content: dict[str, Any]) -> str:
    body = json.dumps(content, sort_keys=True, allow_nan=False)
    return f"gymflow file beside a run\n{path.resolve()}\n{body}"


def write_sealed(path: Path, content: dict[str, Any]) -> Path:
    """`content` written as JSON at `path` with its seal (the key made if there is none)."""
    key = load_key(create=True)
    assert key is not None  # made when absent
    sealed = {**content, SEAL_FIELD: key.mac(_message(path, content))}
    return write_text(path, json.dumps(sealed, indent=1, allow_nan=False))


def read_sealed(path: Path) -> dict[str, Any] | None:
    """What `write_sealed` wrote at `path`, without its seal; None when absent, unreadable, not
    sealed, or sealed for another place or by another key."""
    key = load_key(create=False)
    if key is None or not path.is_file():
        return None
    try:
        document = parse(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    content = dict(cast("dict[str, Any]", document))
    seal = content.pop(SEAL_FIELD, None)
    try:
        expected = key.mac(_message(path, content))
    except ValueError:  # a value JSON cannot write again (NaN): not what gymflow wrote
        return None
    return content if isinstance(seal, str) and hmac.compare_digest(seal, expected) else None
