"""Rewriting a string column's statistics in a DuckDB file, as whoever can write the file can:
the record of its least and greatest value found by its bytes, replaced, and the checksum that
begins its block made right, so DuckDB opens the file and reads the forged bounds."""

from __future__ import annotations

import struct
from pathlib import Path

import duckdb
import numpy as np
import pytest

from gymflow.store.db import _HEADERS_BYTES


def bounds_record(low: str, high: str) -> bytes:
    """A string column's statistics record as DuckDB 2.0.1 serializes its bounds (field 205:
    24 bytes, each bound's first 12, padded with NUL)."""
    return b"\xcd\x00\x18" + low.encode().ljust(12, b"\0") + high.encode().ljust(12, b"\0")


def _checksum(block: bytes) -> int:
    """DuckDB's block checksum: every 8-byte word times a constant, all XORed, XOR 5381."""
    words = np.frombuffer(block, dtype="<u8")
    with np.errstate(over="ignore"):
        mixed = np.bitwise_xor.reduce(words * np.uint64(0xBF58476D1CE4E5B9))
    return int(mixed) ^ 5381


def forge_bounds(store: Path, was: tuple[str, str], now: tuple[str, str], records: str) -> int:
    """Rewrite the statistics records of bounds `was` to `now` in `store`: of the two a one-
    segment column has, the segment's (first in the file), the table's (second) or both
    (`records`); the number rewritten. `pytest.fail` when the file does not hold exactly two."""
    raw = duckdb.connect(str(store), read_only=True)
    try:
        (block_bytes,) = raw.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    finally:
        raw.close()
    old, new = bounds_record(*was), bounds_record(*now)
    data = bytearray(store.read_bytes())
    found, at = [], data.find(old)
    while at >= 0:
        found.append(at)
        at = data.find(old, at + 1)
    if len(found) != 2:
        pytest.fail(f"{len(found)} records of {was} in the file, not a segment's and a table's")
    chosen = {"segment": found[:1], "table": found[1:], "both": found}[records]
    blocks = set()
    for at in chosen:
        data[at : at + len(new)] = new
        blocks.add(_HEADERS_BYTES + (at - _HEADERS_BYTES) // block_bytes * block_bytes)
    for start in blocks:
        body = bytes(data[start + 8 : start + block_bytes])
        data[start : start + 8] = struct.pack("<Q", _checksum(body))
    store.write_bytes(bytes(data))
    return len(chosen)
