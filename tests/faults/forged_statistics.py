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


def _rewritten(store: Path, edits: list[tuple[int, bytes]]) -> None:
    """`store` with each `(offset, bytes)` of `edits` written over it and every block touched
    given its checksum."""
    raw = duckdb.connect(str(store), read_only=True)
    try:
        (block_bytes,) = raw.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    finally:
        raw.close()
    data = bytearray(store.read_bytes())
    blocks = set()
    for at, new in edits:
        data[at : at + len(new)] = new
        blocks.add(_HEADERS_BYTES + (at - _HEADERS_BYTES) // block_bytes * block_bytes)
    for start in blocks:
        body = bytes(data[start + 8 : start + block_bytes])
        data[start : start + 8] = struct.pack("<Q", _checksum(body))
    store.write_bytes(bytes(data))


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The unsigned LEB128 integer at `at`, and where it ends."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _as_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


#: The bit of a string record's packed field 206 (after its bounds) that says its greatest
#: value is the whole value, not its first bytes: no listing of DuckDB's shows it.
MAX_EXACT = 0b100


def mark_max_exact(
    store: Path, low: str, high: str, *, followed_by: tuple[str, str] | None = None
) -> int:
    """Flag every string record of bounds `low` and `high` (their first 12 bytes) as holding the
    whole greatest value, or only those whose next string record has bounds `followed_by` (the
    next column's); how many were flagged. A value longer than `high` is then above it."""
    data = store.read_bytes()
    record = bounds_record(low[:12], high[:12])
    edits, at = [], data.find(record)
    while at >= 0:
        packed_at = at + len(record)
        if data[packed_at : packed_at + 2] == b"\xce\x00":
            packed, end = _varint(data, packed_at + 2)
            flagged = _as_varint(packed | MAX_EXACT)
            after = data.find(b"\xcd\x00\x18", end)
            follows = followed_by is None or data[after : after + 27] == bounds_record(*followed_by)
            if len(flagged) == end - packed_at - 2 and follows:
                edits.append((packed_at + 2, flagged))
        at = data.find(record, at + 1)
    _rewritten(store, edits)
    return len(edits)


def integer_record(low: int, high: int) -> bytes:
    """An integer column's statistics record as DuckDB 2.0.1 serializes its bounds (fields 200
    and 201, each a value of field 101 flagged present by field 100), for bounds below 64."""
    return b"".join(
        bytes([field, 0, 0x64, 0, 1, 0x65, 0, value, 0xFF, 0xFF])
        for field, value in ((0xC8, low), (0xC9, high))
    )


def forge_integer_bounds(store: Path, was: tuple[int, int], now: tuple[int, int]) -> int:
    """Rewrite every integer statistics record of bounds `was` to `now` (each below 64); how
    many were rewritten."""
    data, old = store.read_bytes(), integer_record(*was)
    found, at = [], data.find(old)
    while at >= 0:
        found.append(at)
        at = data.find(old, at + 1)
    _rewritten(store, [(at, integer_record(*now)) for at in found])
    return len(found)


def _sleb128(value: int, width: int | None = None) -> bytes:
    """`value` as DuckDB writes a signed integer (signed LEB128), padded to `width` bytes."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        last = (value == 0 and not low & 0x40) or (value == -1 and low & 0x40)
        if last and (width is None or len(out) + 1 >= width):
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def forge_bigint_max(store: Path, was: int, now: int) -> int:
    """Rewrite every BIGINT statistics record whose greatest value is `was` to `now` (written
    in as many bytes); how many were rewritten."""
    data = store.read_bytes()
    old = b"\xc9\x00\x64\x00\x01\x65\x00" + _sleb128(was)
    new = old[:7] + _sleb128(now, len(old) - 7)
    assert len(new) == len(old), "the new bound takes more bytes than the old"
    found, at = [], data.find(old)
    while at >= 0:
        found.append(at)
        at = data.find(old, at + 1)
    _rewritten(store, [(at, new) for at in found])
    return len(found)


def forge_bounds(store: Path, was: tuple[str, str], now: tuple[str, str], records: str) -> int:
    """Rewrite the statistics records of bounds `was` to `now` in `store`: of the two a one-
    segment column has, the segment's (first in the file), the table's (second) or both
    (`records`); the number rewritten. `pytest.fail` when the file does not hold exactly two."""
    old, new = bounds_record(*was), bounds_record(*now)
    data = store.read_bytes()
    found, at = [], data.find(old)
    while at >= 0:
        found.append(at)
        at = data.find(old, at + 1)
    if len(found) != 2:
        pytest.fail(f"{len(found)} records of {was} in the file, not a segment's and a table's")
    chosen = {"segment": found[:1], "table": found[1:], "both": found}[records]
    _rewritten(store, [(at, new) for at in chosen])
    return len(chosen)
