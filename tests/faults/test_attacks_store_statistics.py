"""Known, not fixed: a store's persisted column statistics decide gymflow's answers. DuckDB keeps
each column's min and max in the file (per table and per row group) and trusts them: the planner
folds a filter the statistics say no row meets, and a scan skips a row group its zone map rules
out. Rewriting the statistics of `verifications.status` from 'ok' to 'zz' (the block's checksum
made right; no row, seal or catalog object changed) opens in both modes, and `gym eval profile`
scores none of the run's verdicts (plain DuckDB reads `min(status)` 'zz' and `sum((status =
'ok')::INT)` 0 too; only the values themselves, `list(status)`, still read 'ok'). The open's
checks read objects and schema, never statistics against values; `SET disabled_optimizers =
'statistics_propagation'` stops the folding but not the zone maps, and DuckDB has no setting
that ignores those. Strict: once a store like this is refused, or read by its values, this test
fails and its mark comes off."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import duckdb
import numpy as np
import pytest

from gymflow.store.db import _HEADERS_BYTES
from tests.conftest import gym_in_process as gym
from tests.faults.stores import collect_run

#: A string column's statistics record as DuckDB 2.0.1 serializes it: min and max, 'ok' each.
STATUS_OK = b"\xcd\x00\x18ok" + b"\0" * 10 + b"ok" + b"\0" * 10


def _checksum(block: bytes) -> int:
    """DuckDB's block checksum: every 8-byte word times a constant, all XORed, XOR 5381."""
    words = np.frombuffer(block, dtype="<u8")
    with np.errstate(over="ignore"):
        mixed = np.bitwise_xor.reduce(words * np.uint64(0xBF58476D1CE4E5B9))
    return int(mixed) ^ 5381


def _forge_status_statistics(store: Path) -> int:
    """Rewrite every min = max = 'ok' statistics record to 'zz', the checksum that begins each
    block after the file's headers made right; the number of records rewritten."""
    raw = duckdb.connect(str(store), read_only=True)
    try:
        (block_bytes,) = raw.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    finally:
        raw.close()
    data = bytearray(store.read_bytes())
    found, at = [], data.find(STATUS_OK)
    while at >= 0:
        found.append(at)
        at = data.find(STATUS_OK, at + 1)
    blocks = set()
    for at in found:
        data[at + 3 : at + 5] = b"zz"
        data[at + 15 : at + 17] = b"zz"
        blocks.add(_HEADERS_BYTES + (at - _HEADERS_BYTES) // block_bytes * block_bytes)
    for start in blocks:
        body = bytes(data[start + 8 : start + block_bytes])
        data[start : start + 8] = struct.pack("<Q", _checksum(body))
    store.write_bytes(bytes(data))
    return len(found)


@pytest.fixture(scope="module")
def forged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A collected run whose statistics of `verifications.status` are forged, and how many
    verdicts it holds. That the forgery took effect is checked in plain DuckDB, failing with
    `pytest.fail` (not an AssertionError, the one failure the test's mark expects): the values
    read as stored, 'ok' each, while a filter on them sees none."""
    run = collect_run(tmp_path_factory.mktemp("forged") / "run")
    store = run / "gymflow.duckdb"
    rewritten = _forge_status_statistics(store)
    raw = duckdb.connect(str(store), read_only=True)
    try:
        (statuses,) = raw.execute("SELECT list(status) FROM verifications").fetchone() or ([],)
        (seen,) = raw.execute(
            "SELECT count(*) FROM verifications WHERE status = 'ok'"
        ).fetchone() or (None,)
    finally:
        raw.close()
    if not rewritten or not statuses or set(statuses) != {"ok"} or seen != 0:
        pytest.fail(f"the forgery did not take: {rewritten} records, {statuses}, {seen} seen")
    return run, len(statuses)


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="a store's forged statistics are trusted"
)
def test_a_store_whose_statistics_were_forged_is_refused_or_read_by_its_values(
    forged: tuple[Path, int], tmp_path: Path
) -> None:
    run, verdicts = forged
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    if done.returncode != 0:
        assert str(run / "gymflow.duckdb") in done.stderr, done.stderr
        return
    assert json.loads(done.stdout)["coverage"]["scored"] == verdicts, done.stdout
