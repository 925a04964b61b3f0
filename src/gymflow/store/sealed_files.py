"""Files gymflow keeps beside a run for its report (the regression gate's verdict, a
confirmation's outcome), sealed by this machine's key and bound to their place: a file anyone
can write beside a run made the report say "Regression gate passed, +18.0 points" and show an
experiment's outcome no experiment had (attack pass 5, s01). A file is also bound to the state
of the run's store it was made from (the run's id and every `meta` record: the seals' records
and the version read, which every writer changes): sealed to its place alone, last night's
"passed" gate.json, put back beside tonight's run in the same folder, was shown for a run at
5% whose gate had just failed (attack pass 6, s15). A file that is not sealed, sealed for
another place or another state of the store, or sealed by another key reads as absent.

The file stays the JSON object it was (`gate.json`'s `passed` and `checks` at its top), with one
more field, `gymflow_seal`: the MAC of its place and its other fields."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any, cast

import duckdb

from gymflow.core.bounded_files import FileBoundError, read_bounded
from gymflow.core.errors import GymflowError
from gymflow.core.json_text import parse
from gymflow.core.written import write_text
from gymflow.store.db import connect
from gymflow.store.seal_key import load_key

SEAL_FIELD = "gymflow_seal"
#: Past this, a file is not one gymflow wrote: a 1 GB sparse gate.json took `gym report` 2.3 GB
#: of memory before it was found unsealed (attack pass 6, s20).
MAX_BYTES = 1 << 20


def _small_text(path: Path) -> str | None:
    """The text of `path` when it is a regular file no larger than MAX_BYTES; else None (opened
    without blocking: a FIFO is never waited on)."""
    try:
        return read_bounded(path, MAX_BYTES, follow_links=True).decode()
    except (OSError, FileBoundError, UnicodeDecodeError):
        return None


def store_state(run_dir: Path) -> str:
    """The state of the run's store a file beside it was made from: a digest of its runs' ids and
    every `meta` record. Empty when there is no store to read (the file then binds to none)."""
    try:
        with connect(run_dir, read_only=True) as con:
            runs = con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()
            meta = con.execute("SELECT key, value FROM meta ORDER BY key").fetchall()
    except (GymflowError, duckdb.Error):  # no store, or one that cannot be read: no state
        return ""
    text = json.dumps([[str(r[0]) for r in runs], [[str(k), str(v)] for k, v in meta]])
    return hashlib.sha256(text.encode()).hexdigest()


def _message(path: Path, content: dict[str, Any], state: str) -> str:
    body = json.dumps(content, sort_keys=True, allow_nan=False)
    return f"gymflow file beside a run\n{path.resolve()}\n{state}\n{body}"


def write_sealed(path: Path, content: dict[str, Any], *, run_dir: Path) -> Path:
    """`content` written as JSON at `path` with its seal (the key made if there is none), bound
    to the state of the store in `run_dir` now."""
    key = load_key(create=True)
    assert key is not None  # made when absent
    sealed = {**content, SEAL_FIELD: key.mac(_message(path, content, store_state(run_dir)))}
    return write_text(path, json.dumps(sealed, indent=1, allow_nan=False))


def read_sealed(path: Path, *, run_dir: Path) -> dict[str, Any] | None:
    """What `write_sealed` wrote at `path`, without its seal; None when absent, unreadable, not
    sealed, or sealed for another place, another state of the store in `run_dir`, or by
    another key. A file larger than any gymflow writes, or not a regular file, is not read."""
    key = load_key(create=False)
    text = _small_text(path) if key is not None else None
    if key is None or text is None:
        return None
    try:
        document = parse(text)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    content = dict(cast("dict[str, Any]", document))
    seal = content.pop(SEAL_FIELD, None)
    try:
        expected = key.mac(_message(path, content, store_state(run_dir)))
    except ValueError:  # a value JSON cannot write again (NaN): not what gymflow wrote
        return None
    return content if isinstance(seal, str) and hmac.compare_digest(seal, expected) else None
