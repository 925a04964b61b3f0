"""The seal on every rollout's identity and outcome, whatever its verdict: which run, task and
repeat it counts for, whether it counts (its status and failure kind), and what the diagnosis
and the profile read of it beside its text (cut at the limit, its calls, tokens, counters, error
and timings).

A verdict's seal covers its rollout, but a rollout without a verdict had no seal at all: a
failing rollout's verdict deleted and the rollout set to `status='failed',
failure_kind='transport'` was left out of every score (a failed rollout needs no verdict), and
pass@1 went from 0.60 to 0.65 with health healthy (second attacker's pass over 2a91e13, a03).
Setting the failing rollouts' `incomplete` moved diagnose's next action (a05).

One record in `meta.rollouts_seal`: the count of rollouts and the XOR of each rollout's MAC
(HMAC of its framed columns, `sealed_inputs.framed`, computed in Python by the key's `sealer`
as every seal is). A XOR of MACs of distinct messages (the rollout id is the key) is a MAC of
the set (Bellare, Guérin and Rogaway's XOR MAC): a row changed, added or removed changes it,
and without the key no change can be made up for. Unlike one MAC over every row, it is kept
up to date per batch: a writer adding rollouts folds in their MACs, one setting them aside
(`superseded.py`) folds them out, in the transaction that writes them; a merge or an import,
which writes every row, computes it whole (`seal_rollouts`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from duckdb import DuckDBPyConnection

from gymflow.core.same_text import same_text
from gymflow.store.arrow_reads import arrow_batches
from gymflow.store.sealed_inputs import framed


class SealKey(Protocol):
    """What sealing the rollouts needs of `seal.SealKey` (which imports this module)."""

    @property
    def sealer(self) -> Any: ...


ROLLOUTS_KEY = "rollouts_seal"
#: The rollout columns sealed, in order: its identity, whether and how it counts, and what the
#: diagnosis and the profile read beside its text (its text and trajectory are its verdict's
#: seal's): its counters (a turn limit claimed moved the next action from model training to
#: harness work, third attacker's pass a01), its error, its timings.
SEALED_OUTCOME = (
    "rollout_id",
    "run_id",
    "task_id",
    "repeat_index",
    "status",
    "failure_kind",
    "incomplete",
    "num_turns",
    "num_model_calls",
    "input_tokens",
    "output_tokens",
    "counters_json",
    "error",
    "latency_s",
    "started_at",
    "finished_at",
)
#: Bytes of one rollout's MAC kept (128 bits, as a verdict's seal).
_MAC_BYTES = 16
#: Each rollout's message, apart from any verdict's (theirs begin with a framed id, never this).
_MESSAGE = (
    "encode(concat('gymflow rollout v1', chr(30), "
    + ", chr(31), ".join(framed(column) for column in SEALED_OUTCOME)
    + "))"
)


def _fold(
    con: DuckDBPyConnection, key: SealKey, where: str, params: list[Any] | None
) -> tuple[int, bytes]:
    """(how many, the XOR of their MACs) of the rollouts `where` selects."""
    state = key.sealer.fresh()
    total = np.zeros(_MAC_BYTES // 8, dtype=np.uint64)
    count = 0
    for batch in arrow_batches(con, f"SELECT {_MESSAGE} FROM rollouts WHERE {where}", params):
        macs = bytearray()
        for message in batch.column(0).to_pylist():
            mac = state.copy()
            mac.update(message)
            macs += mac.digest()[:_MAC_BYTES]
        if macs:
            rows = np.frombuffer(bytes(macs), dtype=np.uint64).reshape(-1, _MAC_BYTES // 8)
            total ^= np.bitwise_xor.reduce(rows, axis=0)
            count += len(rows)
    return count, total.tobytes()


def _text(count: int, digest: bytes) -> str:
    return f"{count}:{digest.hex()}"


def _parsed(text: str) -> tuple[int, bytes] | None:
    count, _, digest = text.partition(":")
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    if not count.isdigit() or len(raw) != _MAC_BYTES:
        return None
    return int(count), raw


def _stored(con: DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key = ?", [ROLLOUTS_KEY]).fetchone()
    return None if row is None else str(row[0])


def _write(con: DuckDBPyConnection, value: str) -> None:
    con.execute(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [ROLLOUTS_KEY, value],
    )


def rollouts_record(con: DuckDBPyConnection, key: SealKey) -> str:
    """The record of every rollout the store holds now."""
    return _text(*_fold(con, key, "TRUE", None))


def rollouts_recorded(con: DuckDBPyConnection) -> bool:
    """Whether the store holds the record (a store sealed before it has none)."""
    return _stored(con) is not None


def seal_rollouts(con: DuckDBPyConnection, key: SealKey) -> None:
    """Seal every rollout as it is now (a merge or an import, which wrote them all)."""
    _write(con, rollouts_record(con, key))


def rollouts_sealed(con: DuckDBPyConnection, key: SealKey) -> bool | None:
    """Whether the rollouts are those the store's writers sealed; None when it holds no record
    (sealed before it existed: `seal.StoreSeal.rollouts_required` says whether it must)."""
    stored = _stored(con)
    if stored is None:
        return None
    return same_text(stored, rollouts_record(con, key))


def rollouts_changed(
    con: DuckDBPyConnection,
    claim: Callable[[], SealKey],
    where: str,
    params: list[Any] | None,
    *,
    added: bool,
) -> None:
    """Fold the rollouts `where` selects into the record (`added`: just inserted) or out of it
    (about to be set aside), in the writer's transaction, with the key `claim` gives (the
    writer's `seal.claim`: a store another key sealed is refused); the writer checked the record
    before writing (`sealed_first.py`). A store without one gets it whole with its next seal
    record (`seal._write_record`)."""
    stored = _stored(con)
    if stored is None:
        return  # not sealed yet, or sealed before the record: the next record written seals all
    parsed = _parsed(stored)
    if parsed is None:
        return  # a garbled record stays garbled: it reads as edited, and writers refuse it
    count, digest = parsed
    n, fold = _fold(con, claim(), where, params)
    total = np.frombuffer(digest, dtype=np.uint64) ^ np.frombuffer(fold, dtype=np.uint64)
    _write(con, _text(count + n if added else count - n, total.tobytes()))
