"""The seal: a keyed MAC on every stored verdict, so a store edited by someone without the key
reads as tampered.

Health can check that a verdict agrees with its reward, and `reverify --check` that it is what
the verifier gives again; neither can see a rollout whose output was rewritten to the reference
answer together with its verdict set to pass. The seal binds each verdict (rollout id, verifier
version, status, reward, passed, failure kind, details) to what was judged (the rollout's stored
final text and trajectory) and to where it counts (the rollout's run, task, repeat, status and
failure kind) under a key kept outside the store (`GYMFLOW_SEAL_KEY`, or a key file
in the user's config folder): whoever can write the DuckDB file or the object storage a shard is
published to cannot compute it.

The MAC is HMAC-SHA256, truncated to 128 bits, of a message DuckDB frames from the stored values
(`message_sql`: one expression every writer seals with and every check recomputes), computed in
Python over the messages read out as Arrow batches (`Sealer`). Neither the key nor anything made
from it (HMAC's pads) reaches DuckDB: a store is a file from anyone, and any expression it holds
(a column's default, a generated column) runs in gymflow's statements, so whatever a session
variable or a statement held, the store could read or copy.

Which key sealed a store is in its `meta` table (`seal`: key id, the count of verdicts written
before the store was first sealed, and a MAC of both): a writer holding another key refuses to
write, so one store never mixes keys."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from duckdb import DuckDBPyConnection

from gymflow.core.credentials import SEAL_KEY_ENV
from gymflow.core.errors import UserError
from gymflow.core.same_text import same_text
from gymflow.core.user_folders import user_config
from gymflow.store.arrow_reads import arrow_batches, joined_strings
from gymflow.store.generations import (
    fresh_history,
    read_generation,
    record_at,
    recorded,
    write_generation,
)
from gymflow.store.named_paths import built_aside as built_aside
from gymflow.store.named_paths import path_names, recorded_names, store_names
from gymflow.store.sealed_inputs import INPUTS_VERSION, inputs_sealed, seal_inputs
from gymflow.store.sealed_rows import (
    MODEL_CALLS,
    ROLLOUTS,
    rows_counted,
    rows_recorded,
    rows_sealed,
    seal_rows,
)

#: Bytes of a key made on first use, and the fewest a given key may have.
KEY_BYTES = 32
MIN_KEY_BYTES = 16
#: Hex characters of a seal kept: HMAC-SHA256 truncated to 128 bits (RFC 2104 allows it).
SEAL_HEX = 32


class SealKeyError(UserError):
    """No usable seal key: a key file readable by others, not the user's, or a malformed
    GYMFLOW_SEAL_KEY; or a store or shard sealed with another key than this machine's."""


@dataclass(frozen=True)
class SealKey:
    secret: bytes
    #: where the key came from (the variable's name or the file's path), for messages
    source: str

    @property
    def key_id(self) -> str:
        """Names the key without revealing it: stored beside the seals, compared at merge."""
        return self.mac("gymflow seal key id")[:16]

    def mac(self, text: str) -> str:
        """HMAC-SHA256 of `text`, hex: the seal of a manifest or of the store's seal record."""
        return hmac.new(self.secret, text.encode(), "sha256").hexdigest()

    @functools.cached_property
    def sealer(self) -> Sealer:
        """The key's HMAC state, computed once: what every verdict's seal is made with."""
        return Sealer(self)


def key_file() -> Path:
    """`$XDG_CONFIG_HOME/gymflow/seal.key` (by default `~/.config/gymflow/seal.key`)."""
    return user_config("seal.key")


def _decode(text: str, where: str) -> bytes:
    text = text.strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        try:
            secret = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise SealKeyError(f"{where}: not a seal key (hex or base64)") from None
    if len(secret) < MIN_KEY_BYTES:
        raise SealKeyError(
            f"{where}: a seal key of {len(secret)} bytes; give at least {MIN_KEY_BYTES} "
            f"(e.g. `python -c 'import secrets; print(secrets.token_hex({KEY_BYTES}))'`)"
        )
    return secret


def _checked_file(path: Path) -> bytes:
    """The key in `path`, refused when anyone but its owner could read it or it is not ours.
    Checked on the open file, not the path: a file swapped in between a check and a read (by
    whoever can write the folder) is the file checked."""
    try:
        # non-blocking: a FIFO put in its place must not hang every run
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as opened:
            info = os.fstat(opened.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SealKeyError(f"{path}: seal key file is not a regular file; refused")
            text = opened.read(4096).decode("utf-8", "replace")
        if info.st_uid != os.geteuid():
            raise SealKeyError(f"{path}: seal key file not owned by this user; refused")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise SealKeyError(
                f"{path}: seal key file is readable or writable by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); `chmod 600 {path}`"
            )
        return _decode(text, str(path))
    except OSError as exc:
        raise SealKeyError(f"{path}: cannot read the seal key: {exc.strerror or exc}") from None


def _create_file(path: Path) -> None:
    """Make the key file whole or not at all: written aside, then linked into place (a link
    never replaces a file), so a process starting at the same moment reads either no file or
    the whole key, never the empty file another has just created (8 processes making the key
    at once: one in ten tries failed with "a seal key of 0 bytes")."""
    partial = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(os.urandom(KEY_BYTES).hex() + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.link(partial, path)
    except FileExistsError:  # another process made it first: use theirs
        pass
    except OSError as exc:
        raise SealKeyError(
            f"{path}: cannot create the seal key file: {exc.strerror or exc} "
            f"(or set {SEAL_KEY_ENV})"
        ) from None
    finally:
        partial.unlink(missing_ok=True)


def load_key(*, create: bool) -> SealKey | None:
    """This machine's seal key: GYMFLOW_SEAL_KEY if set, else the key file, made (0600) when
    `create` and absent. None when there is none and `create` is false (a reader never makes
    a key: a check without one says so)."""
    if given := os.environ.get(SEAL_KEY_ENV):
        return SealKey(_decode(given, SEAL_KEY_ENV), SEAL_KEY_ENV)
    path = key_file()
    if not path.exists():
        if not create:
            return None
        _create_file(path)
    return SealKey(_checked_file(path), str(path))


# -- the seal: a message framed in SQL, its MAC in Python --------------------------------------
#
# The message is built by DuckDB from the stored values (one `concat`, no key in it); the MAC is
# computed here, over the message read out as Arrow batches, from the key's HMAC state made once
# (`Sealer`). No statement, session variable or expression a store can hold (a default, a
# generated column, a view) ever sees the key or its pads: a store that reads them reads NULL.


def _framed(column: str) -> str:
    """A value as `bytes:text` (NULL as a bare `:`; `concat` skips NULLs): no two messages of
    other values read alike. One `concat` builds the whole message: a chain of `||` copied it
    once per field, a third of its cost."""
    text = f"{column}::VARCHAR"
    return f"strlen({text}), ':', {text}"


#: The verdict's columns a seal covers, in order (every one but its time).
SEALED_VERDICT = ("rollout_id", "verifier_version", "status", "failure_kind", "details_json")
#: The rollout's columns a seal covers: what was judged (final text, trajectory), and what the
#: scores read beside the verdict: which run, task and repeat it counts for (a verdict moved to
#: another task by editing `task_id` raised pass@k) and whether it counts at all (a failing
#: rollout's status set to an error is left out of every score). `rollout_id` alone does not
#: bind them: nothing recomputes it from them.
SEALED_ROLLOUT = (
    "run_id",
    "task_id",
    "repeat_index",
    "status",
    "failure_kind",
    "output_text",
    "trajectory_json",
)
#: The column a sealing or checking SELECT names its message (`message_sql`) with.
MESSAGE = "seal_message"


def message_sql(verdict: str, rollout: str, prefix: str = "") -> str:
    """THE message a verdict's seal is the MAC of, as a BLOB: SQL over a relation `verdict`
    holding the verdict's columns and `rollout` holding its rollout's `SEALED_ROLLOUT` columns,
    each named with `prefix` (one relation may be both, the rollout's columns then prefixed
    apart from the verdict's). The same framing stores sealed before carry."""
    parts = [_framed(f"{verdict}.{name}") for name in SEALED_VERDICT]
    # a number and a boolean hold no `|`: as text, NULL as nothing
    parts += [f"{verdict}.reward", f"{verdict}.passed"]
    parts += [_framed(f"{rollout}.{prefix}{name}") for name in SEALED_ROLLOUT]
    return "encode(concat(" + ", '|', ".join(parts) + "))"


#: SHA-256's block: a longer key is hashed first, a shorter one padded to it (RFC 2104).
_BLOCK = 64


class Sealer:
    """A key's HMAC-SHA256 with its inner and outer states computed once: the seal of one
    message is two SHA-256 compressions of it plus two of a block."""

    def __init__(self, key: SealKey) -> None:
        self._state = hmac.new(key.secret, digestmod="sha256")
        # RFC 2104's two keyed SHA-256 states, for one-message MACs (`digest`): a message costs
        # two C-level hashlib copies, where the `hmac` object's copy is Python-level (0.72
        # against 1.13 µs a message; three messages sealed a rollout collected)
        secret = key.secret if len(key.secret) <= _BLOCK else hashlib.sha256(key.secret).digest()
        padded = secret.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(padded.translate(hmac.trans_36))
        self._outer = hashlib.sha256(padded.translate(hmac.trans_5C))

    def fresh(self):
        """A copy of the key's HMAC state, for one message given in parts."""
        return self._state.copy()

    def digest(self, message: bytes) -> bytes:
        """HMAC-SHA256 of one message, whole (32 bytes): `hmac.new(key, message).digest()`."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def seal(self, message: bytes | None) -> str | None:
        if message is None:
            return None
        return self.digest(message)[: SEAL_HEX // 2].hex()

    def seals(self, messages: Any) -> Any:
        """The seal of every message (a BLOB column DuckDB framed; never NULL), as an Arrow
        string array built from its buffers: `pa.array` over Python values imports pandas
        (0.7 s of a command's start), and one hex of all the digests is faster than one each.
        A `pyarrow.Array` of `messages`, one (`Any`: pyarrow has no type stubs)."""
        digest = self.digest
        digests = [digest(message)[: SEAL_HEX // 2] for message in messages.to_pylist()]
        count = len(digests)
        offsets = np.arange(0, SEAL_HEX * (count + 1), SEAL_HEX, dtype=np.int32)
        data = b"".join(digests).hex().encode("ascii")
        return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data))


#: Rows a sealing or checking read takes from DuckDB at once (messages are dropped per batch).
SEAL_BATCH = 65_536


def _batches(con, sql: str, params: list | None = None) -> Iterator[pa.RecordBatch]:
    yield from arrow_batches(con, sql, params, SEAL_BATCH)


def sealed(con, key: SealKey, select: str, params: list | None = None) -> pa.Table | None:
    """The rows `select` gives (its last column the message, `message_sql` AS `MESSAGE`) with
    the message replaced by its seal, as Arrow (`seal`), read batch by batch; None for no rows.
    The key stays in this process: DuckDB gets the seals, never what makes them."""
    sealer = key.sealer
    parts = []
    for batch in _batches(con, select, params):
        at = batch.schema.get_field_index(MESSAGE)
        columns = [batch.column(i) for i in range(batch.num_columns) if i != at]
        names = [name for i, name in enumerate(batch.schema.names) if i != at]
        parts.append(pa.table([*columns, sealer.seals(batch.column(at))], [*names, "seal"]))
    return pa.concat_tables(parts) if parts else None


# -- which key sealed a store ----------------------------------------------------------------


SealState = Literal["unsealed", "sealed", "foreign", "stripped"]


@dataclass(frozen=True)
class StoreSeal:
    """What the store's `meta.seal` record says, read against this machine's key."""

    #: `unsealed`: written before the seal (no record, no sealed verdict); `sealed`: by this
    #: machine's key; `foreign`: by a key this machine does not hold (or it holds none);
    #: `stripped`: reads as unsealed or foreign, but this machine sealed the store at this path
    state: SealState
    key_id: str | None
    #: verdicts the store held, unsealed, when it was first sealed: read as "unsealed"
    legacy: int = 0
    #: whether its task list is the one sealed (`armed_state`; None: not checked)
    tasks_sealed: bool | None = None
    #: its seal record says its inputs are sealed (`sealed_inputs.py`): a missing seal of them
    #: is an edit, not an older store
    inputs_required: bool = False
    #: whether its inputs are the ones sealed (`armed_state`; None: not checked, or a store
    #: sealed before they were)
    inputs_sealed: bool | None = None
    #: its seal record says every rollout's identity and outcome is sealed
    #: (`sealed_rows.py`): a missing record of them is an edit, not an older store
    rollouts_required: bool = False
    #: whether its rollouts are the ones sealed (`armed_state`; None: not checked, or a store
    #: sealed before they were)
    rollouts_sealed: bool | None = None
    #: its seal record says every model call is sealed (`sealed_rows.py`), as `rollouts_required`
    calls_required: bool = False
    #: whether its model calls are the ones sealed, as `rollouts_sealed`
    calls_sealed: bool | None = None
    #: its seal record says the records of its rollouts and model calls carry their row count
    #: under the key (`sealed_rows._text`): one without is an edit, not an older store
    counts_required: bool = False
    #: the version its seal record verifies as under this key (1 to `RECORD_VERSION`); 0 when
    #: no record verifies (none, garbled, another key's): the task list's seal is read by it
    record_version: int = 0
    #: its seal record says the store's generation is sealed (`generations.py`): a missing
    #: record of it is an edit, not an older store
    generation_required: bool = False
    #: its generation (`armed_state`; 0: none stored, as in a store sealed before it existed)
    generation: int = 0
    #: whether its generation record is the one sealed over its seal records (None: not
    #: checked, or none stored by a store sealed before it existed)
    generation_sealed: bool | None = None
    #: the highest generation this machine's writers took the store at its path to (0: none)
    generation_recorded: int = 0

    @property
    def rolled_back(self) -> bool:
        """An older sealed state of the store put back at its path: its generation is below
        the one this machine's writers took it to there."""
        return self.state == "sealed" and self.generation < self.generation_recorded

    @property
    def older_state(self) -> bool:
        """An older sealed state of the store, which only its generation shows: put back at its
        path (`rolled_back`), or given a newer state's generation record, which does not hold
        over its own seal records though each of them does. A seal record edited or removed is
        that record's own failure (its check says which), not this one."""
        if self.rolled_back:
            return True
        return (
            self.generation_sealed is False
            and self.record_version > 0
            and self.tasks_sealed is not False
            and self.inputs_sealed is not False
            and self.rollouts_sealed is not False
            and self.calls_sealed is not False
        )


#: The seal record version this gymflow writes: what each version says is sealed beside the
#: verdicts and the task list (a version cannot be changed without the key, so a record of
#: version N whose store lacks the seal of what N seals was edited).
RECORD_VERSION = 6
_SEALED_BY_VERSION = {
    1: {},
    2: {"inputs_required": True},  # `sealed_inputs.py`
    3: {"inputs_required": True, "rollouts_required": True},  # `sealed_rows.ROLLOUTS`
    4: {"inputs_required": True, "rollouts_required": True, "calls_required": True},
    # the generation (`generations.py`), and the server's report among the inputs
    5: {
        "inputs_required": True,
        "rollouts_required": True,
        "calls_required": True,
        "generation_required": True,
    },
    # the row count of the rollouts' and model calls' records under the key (`sealed_rows.py`)
    6: {
        "inputs_required": True,
        "rollouts_required": True,
        "calls_required": True,
        "generation_required": True,
        "counts_required": True,
    },
}


def _inputs_versions(record_version: int) -> tuple[int, ...]:
    """The inputs' MAC versions (`sealed_inputs.SEALED_META`) a store whose seal record is of
    `record_version` may hold: only version 2 (the server's report sealed) from record 5 on, so
    an older MAC put back cannot leave the report out; before, either (a record of before 5
    over a version 2 MAC was put back from another store: its task list, sealed under the
    record's version, says so)."""
    return (INPUTS_VERSION,) if record_version >= 5 else (INPUTS_VERSION, 1)


def _required(version: int) -> dict[str, bool]:
    """What a seal record of `version` says is sealed, as `StoreSeal` fields."""
    return _SEALED_BY_VERSION[version]


#: What a record this key did not write requires (garbled, deleted, naming another key over
#: this key's seals): everything, none of it granted leave to be missing.
_EVERYTHING = _required(RECORD_VERSION)


def _record(key: SealKey, legacy: int, *, version: int = RECORD_VERSION) -> str:
    """The seal record; version 2 says the store's inputs (`sealed_inputs.py`) are sealed too,
    so a store whose record is version 2 and whose inputs seal is gone was edited (version 1,
    written before, says nothing of them; a version cannot be changed without the key);
    version 3 says the same of its rollouts, version 4 of its model calls (`sealed_rows.py`),
    version 5 of its generation (`generations.py`) and the server's report, version 6 of the
    row counts of the rollouts' and model calls' records."""
    body = f"{key.key_id}:{legacy}"
    label = "gymflow store seal " if version == 1 else f"gymflow store seal v{version} "
    return f"{body}:{key.mac(label + body)[:SEAL_HEX]}"


def _has_seal_column(con) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
            "AND table_name = 'verifications' AND column_name = 'seal'"
        ).fetchone()[0]
    )


#: Every stored verdict's id and seal, with the message its seal is the MAC of.
_VERDICT_MESSAGES = (
    f"SELECT v.rollout_id, v.seal, {message_sql('v', 'r')} AS {MESSAGE} "
    "FROM verifications v LEFT JOIN rollouts r USING (rollout_id)"
)


def _sealed_by(con, key: SealKey) -> bool:
    """Whether any stored verdict carries `key`'s seal."""
    if not _has_seal_column(con):
        return False
    for batch in _batches(con, _VERDICT_MESSAGES + " WHERE v.seal IS NOT NULL"):
        same = pc.equal(batch.column(1), key.sealer.seals(batch.column(2)))
        if pc.any(same).as_py():
            return True
    return False


# -- which stores this machine sealed -------------------------------------------------------
#
# Everything in a store can be rewritten together: seals nulled (or the column dropped) and the
# seal record deleted read as a store an older gymflow wrote, a record naming another key over
# garbled seals as a colleague's store, and both only warn. What the store cannot hide is where
# it is: each key keeps, beside the key file, the paths of the stores it sealed, and a store at
# one of them that reads as unsealed or foreign had its seals removed (`stripped`). A store
# moved to a new path before being stripped is not caught (docs/advanced/security.md).


def ledger_file() -> Path:
    """The stores this machine's keys sealed: `key id<TAB>store path` lines, owner-only."""
    return key_file().with_name("sealed-stores")


def store_file(con: DuckDBPyConnection) -> str | None:
    """The real path of the store file `con` has open (None: in memory)."""
    names = store_names(con)
    return names[-1] if names else None


#: The ledger's tag of a store sealed under each record version from 3 on: sealed with its
#: rollouts (3), its model calls (4) (`sealed_rows.py`), its generation (5) and its rows' counts
#: (6). A seal record of an older version found there later was put back from another store, to
#: switch their check off.
_LEDGER_TAGS = {3: "rollouts", 4: "calls", 5: "generation", 6: "counts"}


def _entry(key: SealKey, path: str, *, version: int = 0) -> str:
    """A ledger line: the store at `path` sealed by `key`; with a `version` of `_LEDGER_TAGS`,
    sealed under a record of that version."""
    tag = _LEDGER_TAGS.get(version)
    return f"{key.key_id}\t{tag}\t{path}\n" if tag else f"{key.key_id}\t{path}\n"


def _remember(con: DuckDBPyConnection, key: SealKey, *, version: int = 0) -> None:
    if names := recorded_names(con):
        remember(names[0], key, version=version)


def remember(path: Path | str, key: SealKey, *, version: int = 0) -> None:
    """Record that `key` sealed the store at `path` (its final path: a store built aside and
    renamed into place is recorded where it ends up), once; with `version`, under a seal record
    of that version (a store this gymflow wrote: `RECORD_VERSION`), which seals what every
    version up to it seals. It is listed by its path as named and as it resolves (`path_names`)."""
    ledger = ledger_file()
    lines = [
        entry
        for name in path_names(path)
        for entry in [
            _entry(key, name),
            *(_entry(key, name, version=v) for v in _LEDGER_TAGS if v <= version),
        ]
    ]
    new = [line for line in lines if not _listed(ledger, line)]
    if not new:
        return
    try:
        ledger.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot record the sealed store: {exc.strerror}") from None
    with os.fdopen(fd, "a") as out:  # one short append: whole even beside another writer
        out.write("".join(new))


def remember_copy(source: Path, copy: Path) -> None:
    """A copy of a store this machine's key sealed is recorded as sealed too (a study's arm
    starts from a copy of its base run's store), under the record version the source's was."""
    key = load_key(create=False)
    if key is None:
        return
    ledger, names = ledger_file(), path_names(source)
    if any(_listed(ledger, _entry(key, name)) for name in names):
        remember(copy, key, version=max(_listed_version(ledger, key, name) for name in names))
    # the copy's recorded history is at least the source's (one of a source put back is
    # refused as the source is); `db.copy_store` raises the copy above its path's
    record_at(key, copy, recorded(key, names))


def _listed_version(ledger: Path, key: SealKey, path: str) -> int:
    """The highest record version the ledger says `key` sealed the store at `path` under (0:
    none of `_LEDGER_TAGS`)."""
    listed = [v for v in _LEDGER_TAGS if _listed(ledger, _entry(key, path, version=v))]
    return max(listed, default=0)


def _listed(ledger: Path, entry: str) -> bool:
    if not ledger.exists():
        return False
    try:
        info = ledger.stat()
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
            raise SealKeyError(f"{ledger}: writable by others or not this user's; refused")
        with ledger.open(encoding="utf-8", errors="replace") as lines:
            return entry in lines
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot read the sealed stores: {exc.strerror}") from None


def _remembered(con: DuckDBPyConnection, key: SealKey) -> bool:
    ledger = ledger_file()
    return any(_listed(ledger, _entry(key, name)) for name in store_names(con))


def _remembered_version(con: DuckDBPyConnection, key: SealKey) -> int:
    ledger = ledger_file()
    return max((_listed_version(ledger, key, name) for name in store_names(con)), default=0)


def sealed_at(path: Path | str) -> bool:
    """Whether this machine's key sealed the store at `path` there: the ledger lists it by that
    very path (absolute, links not followed). A copy made by hand at a new path is not listed,
    a copy gymflow makes is (`remember_copy`)."""
    key = load_key(create=False)
    return key is not None and _listed(ledger_file(), _entry(key, os.path.abspath(path)))


STRIPPED = (
    "this machine sealed this store, and it now reads as unsealed or sealed by another key: "
    "its seals or seal record were removed or rewritten in the file (or another store was put "
    "at this path: then move that one to a folder of its own)"
)


def store_seal(con: DuckDBPyConnection, key: SealKey | None) -> StoreSeal:
    """Which key sealed the store `con` (`_seal_record`), and `stripped` when that reads as
    unsealed or foreign at a path this machine's key sealed."""
    found = _seal_record(con, key)
    if found.state in ("unsealed", "foreign") and key is not None and _remembered(con, key):
        return StoreSeal("stripped", key.key_id)
    if found.state == "sealed" and key is not None and 0 < found.record_version < RECORD_VERSION:
        # an older record where this machine sealed under a newer one: put back from another
        # store, to switch the check of what the newer one seals off
        remembered = _remembered_version(con, key)
        if remembered > found.record_version:
            return replace(found, **_required(remembered))
    return found


def _write_record(con: DuckDBPyConnection, key: SealKey, legacy: int) -> None:
    """The seal record (`RECORD_VERSION`), with the rows of every sealed table the store holds
    no seal of yet (first sealed, or sealed before they were) sealed whole: the record says
    they are."""
    seal_rows(con, key, unrecorded_only=True)
    _remember(con, key, version=RECORD_VERSION)
    con.execute(
        "INSERT INTO meta VALUES ('seal', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [_record(key, legacy)],
    )
    _write_task_seal(con, key)


def _record_row(con: DuckDBPyConnection) -> tuple[object, ...] | None:
    return con.execute("SELECT value FROM meta WHERE key = 'seal'").fetchone()


def _seal_record(con, key: SealKey | None) -> StoreSeal:
    """Which key sealed the store `con`, and how many of its verdicts predate the seal. A
    record whose MAC does not verify under this machine's key (an edited count) grants no
    verdict leave to be unsealed."""
    row = _record_row(con)
    if row is None:
        sealed_any = (
            _has_seal_column(con)
            and con.execute("SELECT count(*) FROM verifications WHERE seal IS NOT NULL").fetchone()[
                0
            ]
        )
        if not sealed_any:
            return StoreSeal("unsealed", None)
        # seals without a record: the record was deleted; this key checks them, none unsealed,
        # and the inputs' seal is required (deleted with it, the inputs would go unchecked)
        if key is None:
            return StoreSeal("foreign", None)
        return StoreSeal("sealed", key.key_id, **_EVERYTHING)
    key_id, _, rest = str(row[0]).partition(":")
    if key is None:
        return StoreSeal("foreign", key_id)
    if key_id != key.key_id:
        # a record naming another key over seals this key made was edited, to make every
        # check skip them (`seal_key_unknown`, a warning): this key checks them, none unsealed,
        # and the inputs' seal is required
        return (
            StoreSeal("sealed", key.key_id, **_EVERYTHING)
            if _sealed_by(con, key)
            else StoreSeal("foreign", key_id)
        )
    legacy_text = rest.partition(":")[0]
    legacy = int(legacy_text) if legacy_text.isdigit() and len(legacy_text) < 19 else 0
    # newest first: version 4 before its generation was sealed, 3 before its model calls were,
    # 2 before its rollouts were, 1 before its inputs were
    for version in sorted(_SEALED_BY_VERSION, reverse=True):
        if same_text(_record(key, legacy, version=version), str(row[0])):
            return StoreSeal("sealed", key_id, legacy, **_required(version), record_version=version)
    # a record this key did not write (garbled, or its count edited): it grants nothing, and
    # every seal beside the verdicts' is required
    return StoreSeal("sealed", key_id, 0, **_EVERYTHING)


def foreign_key_message(where: str, key_id: str | None, key: SealKey | None) -> str:
    mine = f"this machine's key ({key.source}) is {key.key_id}" if key else "this machine has none"
    return (
        f"{where}: sealed with a key this machine does not hold (key id {key_id}; {mine}); set "
        f"{SEAL_KEY_ENV} to the key that sealed it (on every worker too)"
    )


# -- which tasks a store holds -----------------------------------------------------------------
#
# A verdict's seal covers its rollout, not whether the rollout's task is there at all: a failing
# task deleted with its rollouts, verdicts and calls took pass@1 from 0.75 to 0.90, healthy.
# The store's task list (each run's ids) is sealed too, in `meta.task_seal`, by the writers
# that add tasks (registration, merge, import: `seal_tasks`).


#: The label of the task list's MAC under each seal record version. From version 3 on it names
#: the version, which binds the record to the store: a record of a version before 3 is the same
#: in every store this key sealed then, so one put in place of a store's own (with its rollouts'
#: seal deleted) would switch that seal off; the task list sealed under version 3 then no longer
#: matches (third attacker's pass, a06). The same holds of each version since: a version 3
#: record put in a version 4 store (its model calls' seal deleted) leaves the task list sealed
#: under version 4's label, which no longer matches.
_TASK_LIST_LABELS = {
    1: "gymflow task list\n",
    2: "gymflow task list\n",
    3: "gymflow task list v3\n",
    4: "gymflow task list v4\n",
    5: "gymflow task list v5\n",
    6: "gymflow task list v6\n",
}


def _task_list_mac(con: DuckDBPyConnection, key: SealKey, version: int) -> str:
    runs = con.execute(
        "SELECT run_id, string_agg(task_id, chr(10) ORDER BY task_id) FROM tasks "
        "GROUP BY run_id ORDER BY run_id"
    ).fetchall()
    listing = "\n\n".join(f"{len(str(run))}:{run}\n{ids}" for run, ids in runs)
    return key.mac(_TASK_LIST_LABELS[version] + listing)[:SEAL_HEX]


def _write_task_seal(con: DuckDBPyConnection, key: SealKey) -> None:
    """The task list sealed under the record a writer leaves (`RECORD_VERSION`), and the
    store's generation over both (`generations.py`)."""
    con.execute(
        "INSERT INTO meta VALUES ('task_seal', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [_task_list_mac(con, key, RECORD_VERSION)],
    )
    write_generation(con, key)


def seal_tasks(con: DuckDBPyConnection, key: SealKey) -> None:
    """Seal the task list and the inputs (`sealed_inputs.py`) the store holds now (after a
    writer added tasks or a verifier version, or chose the current one); a store sealed before
    its inputs, rollouts or model calls were gets the record that says they are
    (`_write_record`)."""
    found = _seal_record(con, key)
    if found.state == "sealed" and 0 < found.record_version < RECORD_VERSION:
        _write_record(con, key, found.legacy)
    _write_task_seal(con, key)
    seal_inputs(con, key)


ROLLOUTS_EDITED = (
    "its rollouts' runs, tasks, repeats, statuses, failure kinds, cuts, token counts, counters "
    "or timings are not "
    "those its writers sealed: a rollout edited, added or deleted in the file (a failing "
    "rollout set to failed leaves the scores)"
)
CALLS_EDITED = (
    "its model calls' statuses, failure kinds, latencies, token counts (cached too), sampling, "
    "requests or responses are not those its writers sealed: a call edited, added or deleted "
    "in the file"
)
TASK_LIST_EDITED = (
    "its task list is not the one its writers sealed: a task (with its rollouts) deleted or "
    "added in the file, or an older store's seal record put in place of its own"
)
GENERATION_EDITED = (
    "its generation record is not the one its writers sealed over its seal records: removed, "
    "edited, or a newer state's record copied into an older state of the store"
)


def older_state(found: StoreSeal) -> str:
    """What a store put back to an older sealed state of itself (`StoreSeal.older_state`) is,
    naming both generations (its caller names the path)."""
    if not found.rolled_back:
        return GENERATION_EDITED
    return (
        f"generation {found.generation} of this store, but this machine's writers took the "
        f"store at this path to generation {found.generation_recorded}: an older copy of it "
        "was put back (a copy kept on purpose opens in a folder of its own)"
    )


INPUTS_EDITED = (
    "its tasks, verifier versions, run row, current version or model server's report are not "
    "those its writers sealed: edited in the file"
)


def check_inputs(con, where: str) -> None:
    """Before a writer changes the store's inputs (registers tasks or a verifier version,
    chooses the current version, merges, judges again): refuse (SealKeyError, nothing written)
    when they are not those this machine's key sealed, so an edited answer key or version row is
    never sealed by the next routine write. A store this key did not seal is `claim`'s to judge."""
    key = load_key(create=False)
    if key is None:
        return
    found = store_seal(con, key)
    if found.state != "sealed":
        return
    inputs = inputs_sealed(con, key, _inputs_versions(found.record_version))
    if inputs is False or (inputs is None and found.inputs_required):
        raise SealKeyError(f"{where}: {INPUTS_EDITED}; nothing written")


def task_list_sealed(con: DuckDBPyConnection, key: SealKey, version: int) -> bool:
    """Whether the store's task list is the one its writers sealed (a task deleted or added
    in the file, or the seal removed, is not)."""
    row = con.execute("SELECT value FROM meta WHERE key = 'task_seal'").fetchone()
    if row is None:
        return False
    # `version`: the one the store's record verifies as (`StoreSeal.record_version`); when
    # no record verifies (deleted or garbled: every seal is then required): any label
    versions = (version,) if version else tuple(sorted(_TASK_LIST_LABELS, reverse=True))
    return any(same_text(str(row[0]), _task_list_mac(con, key, v)) for v in versions)


def claim(con: DuckDBPyConnection, where: str, *, legacy_added: int = 0) -> SealKey:
    """The key a writer seals with, armed on `con`, with the store's seal record written (in
    the caller's transaction). A store sealed with another key is refused: one store, one key.
    `legacy_added`: unsealed verdicts the caller just copied in (a shard from before the
    seal), read as written before the seal rather than as tampered."""
    key = load_key(create=True)
    assert key is not None
    found = store_seal(con, key)
    counted = con.execute("SELECT count(*) FROM verifications").fetchone()
    held = counted[0] if counted else 0
    if found.state == "stripped" and held:
        raise SealKeyError(f"{where}: {STRIPPED}; nothing written")
    if found.state == "foreign":
        raise SealKeyError(foreign_key_message(where, found.key_id, key))
    first = found.state in ("unsealed", "stripped")  # stripped of nothing: a failed first write
    if first:
        fresh_history(con)  # a new store at this path: its generation starts above the path's
    # sealed verdicts but no record: copied in from a sealed shard (a merge's first write);
    # the record is written with only what the caller copied in unsealed counted as legacy
    unrecorded = not first and _record_row(con) is None
    legacy = held if first else found.legacy + legacy_added
    if first or legacy_added or unrecorded:
        _write_record(con, key, legacy)
    if first or unrecorded:
        _remember(con, key)
        seal_tasks(con, key)
    # every writer raises the store's generation, also one that writes no seal record (new
    # verdicts of a version already stored): its state before is then an older one
    write_generation(con, key)
    return key


# -- checking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SealCheck:
    store: StoreSeal
    #: verdicts whose seal does not match (None: not checked, the key is not this machine's)
    mismatched: int | None
    examples: list[str]
    #: the rollout ids of every verdict counted in `mismatched` (health flags each)
    ids: pa.Array | None = None
    #: when every seal was last recomputed and matched, for a check that took that result
    #: (`checked_stores.py`: the file state is the one checked then); None: recomputed now
    checked_at: float | None = None

    @property
    def passed(self) -> bool:
        """Every seal and the inputs' seal matched (what a recorded check needs)."""
        return (
            self.store.state == "sealed"
            and self.mismatched == 0
            and self.store.tasks_sealed is not False
            and self.store.inputs_sealed is not False
            and self.store.rollouts_sealed is not False
            and self.store.calls_sealed is not False
            and self.store.generation_sealed is not False
            and not self.store.rolled_back
        )


class EarlierSealError(UserError):
    """A store this machine's key sealed under an earlier seal record, whose records of its
    rows leave their count outside the key: read by `gym eval migrate` only."""


MIGRATE_COMMAND = "gym eval migrate"


def _counted(con: DuckDBPyConnection, key: SealKey, found: StoreSeal) -> tuple[StoreSeal, bool]:
    """The store's seal as `armed_state` checks it, and whether its rows' records are compared
    with their count under the key. They are not only when its seal record is of a version
    that wrote them with the count in plain text (3 to 5: `sealed_rows._earlier_text`) and no
    record of its rows is one this key wrote with the count keyed: one is (a store sealed under
    version 6 whose older record was put back), and then everything version 6 seals is
    required."""
    if found.counts_required:
        return found, True
    counted = [rows_counted(con, key, spec) for spec in (ROLLOUTS, MODEL_CALLS)]
    if any(counted):
        return replace(found, **_required(RECORD_VERSION)), True
    return found, all(record is None for record in counted)


def earlier_seal_message(where: str, found: StoreSeal) -> str:
    """The one-line refusal of a store sealed under an earlier record (`armed_state`), naming
    the command that migrates it, with its run folder."""
    return (
        f"{where}: sealed by an earlier gymflow (seal record version {found.record_version}), "
        "whose records of its rollouts and model calls leave their row count outside the key "
        f"(two more copies of a sealed row pass them); run `{MIGRATE_COMMAND} "
        f"{Path(where).parent}` to check every seal of it in full and seal it as this gymflow does"
    )


def armed_state(
    con: DuckDBPyConnection, *, rows_matched: bool = False, earlier: bool = False
) -> tuple[StoreSeal, SealKey | None]:
    """Which key sealed the store, and this machine's key when it is that one (the seals can
    then be checked). Never makes a key: a check without one says so. `rows_matched`: the
    store's file is one whose every seal was recomputed and matched, unchanged since
    (`checked_stores.py`): the records of its rollouts and model calls are taken as matching
    rather than recomputed (every row of both tables: most of a check's cost).

    A store this key sealed under a record whose rows' counts are unkeyed (versions 3 to 5) is
    refused (EarlierSealError, naming `gym eval migrate`): its rows' seal cannot tell two more
    copies of a row. `earlier`: that command's full check, which compares those records as
    they were written before it seals them anew."""
    found = store_seal(con, key := load_key(create=False))
    if found.state != "sealed" or key is None:
        return found, None
    found, counted = _counted(con, key, found)
    if not counted and not earlier:
        raise EarlierSealError(earlier_seal_message(store_file(con) or "gymflow.duckdb", found))
    inputs = inputs_sealed(con, key, _inputs_versions(found.record_version))
    if inputs is None and found.inputs_required:
        inputs = False  # the seal of the inputs was removed
    generation = read_generation(con, key)
    generation_sealed = generation.sealed
    if generation_sealed is None and found.generation_required:
        generation_sealed = False  # its record was removed
    rows: dict[str, bool | None] = {}
    for name, spec, required in (
        ("rollouts", ROLLOUTS, found.rollouts_required),
        ("calls", MODEL_CALLS, found.calls_required),
    ):
        if rows_matched:
            rows[name] = True if rows_recorded(con, spec) else None
        else:
            rows[name] = rows_sealed(con, key, spec, counted=counted)
        if rows[name] is None and required:
            rows[name] = False  # their seal was removed
    return replace(
        found,
        tasks_sealed=task_list_sealed(con, key, found.record_version),
        inputs_sealed=inputs,
        rollouts_sealed=rows["rollouts"],
        calls_sealed=rows["calls"],
        generation=generation.number,
        generation_sealed=generation_sealed,
        generation_recorded=recorded(key, store_names(con)),
    ), key


def _mismatched(con, key: SealKey, legacy: int) -> pa.Array:
    """The rollout ids of the verdicts whose seal is not the one their fields and rollout give
    under `key`; an unsealed verdict counts when more are unsealed than predate the seal."""
    sealer = key.sealer
    found: list[Any] = []
    unsealed: list[Any] = []
    for batch in _batches(con, _VERDICT_MESSAGES):
        ids, stored = batch.column(0), batch.column(1)
        again = sealer.seals(batch.column(2))
        # a NULL seal compares as NULL, which `filter` drops: the unsealed are counted apart
        found.append(ids.filter(pc.not_equal(stored, again)))
        unsealed.append(ids.filter(pc.is_null(stored)))
    if sum(len(part) for part in unsealed) > legacy:
        found += unsealed
    return joined_strings(found)


def check_seals(con, max_examples: int = 10, *, earlier: bool = False) -> SealCheck:
    """Recompute every verdict's seal (reads the store, writes nothing); `earlier`: as
    `armed_state`."""
    found, key = armed_state(con, earlier=earlier)
    if found.state == "stripped":
        ids = joined_strings(
            [b.column(0) for b in _batches(con, "SELECT rollout_id FROM verifications")]
        )
    elif found.state == "sealed" and key is not None:
        ids = _mismatched(con, key, found.legacy)
    else:
        return SealCheck(found, None, [])
    examples = pc.take(ids, pc.sort_indices(ids)[:max_examples]).to_pylist()
    return SealCheck(found, len(ids), examples, ids)
