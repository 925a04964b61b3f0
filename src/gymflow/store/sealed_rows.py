"""The seal on every row of the tables no verdict's seal covers whole: each rollout's identity and
outcome, whatever its verdict, and each model call; and on the verdict set, whose every row has
a seal but whose absence none shows (`VERDICTS`). One piece of code for all three (`SealedRows`
says which table, which message, under which `meta` key).

A verdict's seal covers its rollout's text and where it counts, but a rollout without a verdict
had no seal at all: a failing rollout's verdict deleted and the rollout set to
`status='failed', failure_kind='transport'` was left out of every score (a failed rollout needs
no verdict), and pass@1 went from 0.60 to 0.65 with health healthy (second attacker's pass over
2a91e13, a03). Setting the failing rollouts' `incomplete` moved diagnose's next action (a05).
No seal covered a model call either: its latency and cached tokens edited, nothing noticed, and
the decision's agent-record checks, health's call checks and `simulated` read them.

One record per table in `meta` (`rollouts_seal`, `calls_seal`, `verdicts_seal`): the count of its
rows, the XOR of each row's MAC (HMAC of its framed columns, `sealed_inputs.framed`, computed in
Python by the key's `sealer` as every seal is), and a MAC of the table, the count and the XOR
together. A XOR of MACs of distinct messages is a MAC of the set (Bellare, Guérin and Rogaway's XOR
MAC): a row changed, added or removed changes it, and without the key no change can be made up for.
A rollout's id makes its message distinct, a verdict's (rollout id, verifier version); a model
call's (rollout id, call index, attempt) does in every store gymflow writes (`duplicate_identity`
flags any other), and two copies of one row, whose MACs cancel, change the count, which is why the
count is under the key too: stores sealed before it was (seal record versions 3 to 5) held
`COUNT:XOR` with the count in plain text, and two more copies of a sealed call with the count
raised by 2 passed every seal check (attacker's pass 6, s14). Those records are read only by `gym
eval migrate` (`seal.armed_state`).

Unlike one MAC over every row, the record is kept up to date per batch: a writer adding rows folds
in their MACs (`insert_sealed` in `writer.py`, from the values as stored: `RETURNING` the message,
no read of the table back; a verdict's MAC is its seal, computed as it is written:
`writer._insert_sealed`), one setting them aside (`superseded.py`) folds them out, in the
transaction that writes them; a merge or an import, which writes every row, computes it whole
(`seal_rows`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from duckdb import DuckDBPyConnection

from gymflow.core.same_text import same_text
from gymflow.store.arrow_reads import arrow_batches, pa
from gymflow.store.generations import write_generation
from gymflow.store.sealed_inputs import framed
from gymflow.store.verdict_message import JUDGED, message_sql


class SealKey(Protocol):
    """What sealing rows needs of `seal.SealKey` (which imports this module)."""

    @property
    def sealer(self) -> Any: ...

    @property
    def key_id(self) -> str: ...

    def mac(self, text: str) -> str: ...


@dataclass(frozen=True)
class SealedRows:
    """A table whose every row is sealed: its record's `meta` key, the SQL of a row's message,
    as a BLOB, and the relation its rows are read from with what the message needs."""

    table: str
    record: str
    message: str
    source: str


def framed_rows(table: str, record: str, label: str, columns: tuple[str, ...]) -> SealedRows:
    """A table whose row's message is `label` and the `columns`, in order, each framed
    (`sealed_inputs.framed`), read from the table alone: the label keeps a row of one table
    from reading as another's, or as a verdict's message, which begins with a framed id."""
    parts = ", chr(31), ".join(framed(column) for column in columns)
    return SealedRows(table, record, f"encode(concat('{label}', chr(30), {parts}))", table)


ROLLOUTS = framed_rows(
    "rollouts",
    "rollouts_seal",
    "gymflow rollout v1",
    # its identity, whether and how it counts, and what the diagnosis and the profile read
    # beside its text (its text and trajectory are its verdict's seal's): its counters (a turn
    # limit claimed moved the next action from model training to harness work, third
    # attacker's pass a01), its error, its timings
    (
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
    ),
)
MODEL_CALLS = framed_rows(
    "model_calls",
    "calls_seal",
    "gymflow model call v1",
    # Every column, none left out. What reads them: identity, order and count (rollout_id,
    # call_index, attempt: `duplicate_identity`, `agent_calls_unrecorded`, the last call's
    # status, `no_model_calls`); status (`last_call_failed`, `simulated`, the ATIF export);
    # failure_kind (`proxy_refused_calls`, `calls_after_deadline`: the decision's agent-record
    # checks); the token counts (`token_mismatch`, `token_counts_missing`, the ATIF export's
    # cached tokens); sampling_json (`sampling_mismatch`, `identical_repeats`); request_json
    # (the tools offered: `tools_ignored`, diagnose's category and the decision's harness
    # evidence; the exports' first request); response_json (`text_without_call`, `simulated`).
    # http_status, latency_s, reasoning_tokens and error feed no number today; they are sealed
    # anyway (a few bytes each, against a request's or response's kilobytes), so the next
    # figure read of them (a call's latency edited by the attacker's pass) is sealed already.
    (
        "rollout_id",
        "call_index",
        "attempt",
        "status",
        "failure_kind",
        "http_status",
        "latency_s",
        "input_tokens",
        "cached_tokens",
        "output_tokens",
        "reasoning_tokens",
        "sampling_json",
        "request_json",
        "response_json",
        "error",
    ),
)
#: The verdict set: each verdict's MAC is its seal (`verdict_message.message_sql`, over the
#: verdict beside its rollout), so a writer folds in the seals it just computed and a check the
#: seals it recomputes, with no second pass over the verdicts. Each verdict's seal shows an edit
#: of it, not its absence: failing verdicts deleted, or moved into `superseded_verifications`
#: with their seals, left pass@1 raised in every read but health (attack pass 7, s03).
VERDICTS = SealedRows("verifications", "verdicts_seal", message_sql("v", "r"), JUDGED)
#: Every table whose rows are sealed, by name: what a merge or an import seals whole (rollouts
#: from seal record version 3, model calls from 4, verdicts since the generation is sealed over
#: their record: `generations.OPTIONAL`).
SEALED_ROWS = {spec.table: spec for spec in (ROLLOUTS, MODEL_CALLS, VERDICTS)}

#: Bytes of one row's MAC kept (128 bits, as a verdict's seal).
_MAC_BYTES = 16


class Fold:
    """A running count and XOR of row MACs (`_MAC_BYTES` each)."""

    def __init__(self) -> None:
        self.count = 0
        self._total = np.zeros(_MAC_BYTES // 8, dtype=np.uint64)

    def add(self, macs: bytes) -> None:
        """Fold in the MACs given back to back."""
        if macs:
            rows = np.frombuffer(macs, dtype=np.uint64).reshape(-1, _MAC_BYTES // 8)
            self._total ^= np.bitwise_xor.reduce(rows, axis=0)
            self.count += len(rows)

    def add_seals(self, seals: Any) -> None:
        """Fold in verdicts' seals (`seal.Sealer.seals`: each one MAC in hex, never NULL; a
        pyarrow string array, chunked or not), read from the array's buffers: no Python string
        per seal."""
        chunks = seals.chunks if isinstance(seals, pa.ChunkedArray) else [seals]
        for chunk in chunks:
            if len(chunk):
                offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)
                first, last = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
                self.add(bytes.fromhex(chunk.buffers()[2].to_pybytes()[first:last].decode()))

    @property
    def folded(self) -> tuple[int, bytes]:
        """(how many, the XOR of their MACs)."""
        return self.count, self._total.tobytes()


def _folded(key: SealKey, batches: Iterable[Iterable[bytes]]) -> tuple[int, bytes]:
    """(how many, the XOR of their MACs) of the messages, given in batches."""
    digest = key.sealer.digest
    fold = Fold()
    for messages in batches:
        fold.add(b"".join([digest(message)[:_MAC_BYTES] for message in messages]))
    return fold.folded


def _fold(
    con: DuckDBPyConnection, key: SealKey, spec: SealedRows, where: str, params: Any
) -> tuple[int, bytes]:
    """(how many, the XOR of their MACs) of the rows of `spec`'s table `where` selects."""
    sql = f"SELECT {spec.message} FROM {spec.source} WHERE {where}"
    return _folded(key, (batch.column(0).to_pylist() for batch in arrow_batches(con, sql, params)))


#: The label of a record's MAC over its table, count and XOR (`_text`).
_COUNTED_LABEL = "gymflow sealed rows v2\n"
#: Hex characters of that MAC kept (128 bits, as a verdict's seal).
_RECORD_HEX = 32


def _text(key: SealKey, spec: SealedRows, count: int, digest: bytes) -> str:
    """`COUNT:XOR:MAC`, the MAC over the table's record name, the count and the XOR: neither can
    be changed without the key (two more copies of a row leave the XOR as it was)."""
    body = f"{count}:{digest.hex()}"
    mac = key.mac(f"{_COUNTED_LABEL}{spec.record}\n{body}")[:_RECORD_HEX]
    return f"{body}:{mac}"


def _earlier_text(count: int, digest: bytes) -> str:
    """The record as seal record versions 3 to 5 wrote it: `COUNT:XOR`, the count unkeyed."""
    return f"{count}:{digest.hex()}"


def _parsed(key: SealKey, spec: SealedRows, text: str) -> tuple[int, bytes] | None:
    """(count, XOR) of a record `key` wrote (`_text`); None for any other text (an earlier
    record, a count or XOR edited, garbled)."""
    count, _, rest = text.partition(":")
    digest, _, _ = rest.partition(":")
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    if not count.isdigit() or len(count) > 18 or len(raw) != _MAC_BYTES:
        return None
    if not same_text(text, _text(key, spec, int(count), raw)):
        return None
    return int(count), raw


def _stored(con: DuckDBPyConnection, spec: SealedRows) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key = ?", [spec.record]).fetchone()
    return None if row is None else str(row[0])


def _write(con: DuckDBPyConnection, key: SealKey, records: dict[SealedRows, str]) -> None:
    """Tables' records, in one statement, and the store's generation sealed over them
    (`generations.py`)."""
    if not records:
        return
    con.execute(
        "INSERT INTO meta VALUES " + ", ".join(["(?, ?)"] * len(records)) + " "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [value for spec, text in records.items() for value in (spec.record, text)],
    )
    write_generation(con, key)


def rows_record(
    con: DuckDBPyConnection, key: SealKey, spec: SealedRows, *, counted: bool = True
) -> str:
    """The record of every row `spec`'s table holds now; not `counted`: as seal record versions
    3 to 5 wrote it (`_earlier_text`), what `gym eval migrate` checks such a store against."""
    count, digest = _fold(con, key, spec, "TRUE", None)
    return _text(key, spec, count, digest) if counted else _earlier_text(count, digest)


def rows_counted(con: DuckDBPyConnection, key: SealKey, spec: SealedRows) -> bool | None:
    """Whether the table's record is one `key` wrote with its count under the key (`_text`),
    whatever rows the table holds now; None: no record."""
    stored = _stored(con, spec)
    return None if stored is None else _parsed(key, spec, stored) is not None


def rows_recorded(con: DuckDBPyConnection, spec: SealedRows) -> bool:
    """Whether the store holds the table's record (a store sealed before it has none)."""
    return _stored(con, spec) is not None


def seal_rows(con: DuckDBPyConnection, key: SealKey, *, unrecorded_only: bool = False) -> None:
    """Seal every row of every sealed table as it is now (a merge or an import, which wrote
    them all); with `unrecorded_only`, only the tables the store holds no record of this
    gymflow's yet (a store first sealed, sealed before they were, or migrated from a record
    with its count unkeyed: `gym eval migrate`, after checking it in full)."""
    for spec in SEALED_ROWS.values():
        stored = _stored(con, spec)
        if unrecorded_only and stored is not None and _parsed(key, spec, stored) is not None:
            continue
        seal_table(con, key, spec)


def seal_table(con: DuckDBPyConnection, key: SealKey, spec: SealedRows) -> None:
    """Seal every row of `spec`'s table as it is now (its writer checked them)."""
    _write(con, key, {spec: rows_record(con, key, spec)})


def rows_sealed(
    con: DuckDBPyConnection, key: SealKey, spec: SealedRows, *, counted: bool = True
) -> bool | None:
    """Whether the table's rows are those the store's writers sealed; None when it holds no
    record (sealed before it existed: the seal record's version says whether it must).
    `counted`: as `rows_record`."""
    stored = _stored(con, spec)
    if stored is None:
        return None
    return same_text(stored, rows_record(con, key, spec, counted=counted))


def _refolded(
    key: SealKey, spec: SealedRows, stored: str, change: tuple[int, bytes], sign: int
) -> str | None:
    """The record `stored` with the rows of `change` folded in (`sign` +1) or out (-1); None
    for a record this key did not write (garbled, its count edited): it stays so, reads as
    edited, and writers refuse it; refolded, it would be sealed as if honest."""
    parsed = _parsed(key, spec, stored)
    if parsed is None:
        return None
    count, digest = parsed
    n, fold = change
    total = np.frombuffer(digest, dtype=np.uint64) ^ np.frombuffer(fold, dtype=np.uint64)
    return _text(key, spec, count + sign * n, total.tobytes())


def rows_added(
    con: DuckDBPyConnection,
    claim: Callable[[], SealKey],
    added: Sequence[tuple[SealedRows, Iterable[bytes]]],
) -> None:
    """Fold the messages (`spec.message`) of rows just inserted into each table's record, in
    the writer's transaction, with the key `claim` gives (the writer's `seal.claim`: a store
    another key sealed is refused); the writer checked the records before writing
    (`sealed_first.py`). A store without a record gets it whole with its next seal record
    (`seal._write_record`). Every record is read in one statement and written in one: a
    collector's commit holds rows of both tables, and each statement costs it about a
    millisecond whatever its size."""
    found = dict(
        con.execute(
            "SELECT key, value FROM meta WHERE list_contains(?, key)",
            [[spec.record for spec, _ in added]],
        ).fetchall()
    )
    records: dict[SealedRows, str] = {}
    key = None
    for spec, messages in added:
        stored = found.get(spec.record)
        if stored is None:
            continue  # not sealed yet, or sealed before the record: the next record seals all
        key = claim()
        text = _refolded(key, spec, str(stored), _folded(key, [messages]), +1)
        if text is not None:
            records[spec] = text
    if key is not None:
        _write(con, key, records)


def rows_removed(
    con: DuckDBPyConnection,
    claim: Callable[[], SealKey],
    spec: SealedRows,
    where: str,
    params: Any = None,
) -> None:
    """Fold the rows `where` selects out of the record (about to be set aside), in the
    writer's transaction, as `rows_added` folds rows in."""
    stored = _stored(con, spec)
    if stored is None:
        return
    key = claim()
    text = _refolded(key, spec, stored, _fold(con, key, spec, where, params), -1)
    if text is not None:
        _write(con, key, {spec: text})


def folded_in(con: DuckDBPyConnection, key: SealKey, spec: SealedRows, fold: Fold) -> None:
    """Fold verdicts just inserted into the record by their MACs (their seals: `Fold.add`,
    `Fold.add_seals`), as `rows_added` folds rows in by their messages."""
    stored = _stored(con, spec)
    if stored is None:
        return  # not sealed yet: the first seal record seals the table whole
    text = _refolded(key, spec, stored, fold.folded, +1)
    if text is not None:
        _write(con, key, {spec: text})


def rows_match(
    con: DuckDBPyConnection, key: SealKey, spec: SealedRows, found: tuple[int, bytes]
) -> bool | None:
    """Whether the table's record is the one `found` (the count and XOR of every row's MAC,
    computed by the caller as it read them) gives; None when the store holds no record."""
    stored = _stored(con, spec)
    if stored is None:
        return None
    return same_text(stored, _text(key, spec, *found))
