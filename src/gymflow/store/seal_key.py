"""The seal key and what it makes: where the key comes from (`GYMFLOW_SEAL_KEY`, or a key file
in the user's config folder, made owner-only on first use), and the MAC of a verdict's message
computed in Python (`Sealer`, `sealed`).

The MAC is HMAC-SHA256, truncated to 128 bits, of a message DuckDB frames from the stored values
(`verdict_message.message_sql`), read out as Arrow batches. Neither the key nor anything made
from it (HMAC's pads) reaches DuckDB: a store is a file from anyone, and any expression it holds
(a column's default, a generated column) runs in gymflow's statements, so whatever a session
variable or a statement held, the store could read or copy."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from duckdb import DuckDBPyConnection

from gymflow.core.credentials import SEAL_KEY_ENV
from gymflow.core.errors import UserError
from gymflow.core.user_folders import user_config
from gymflow.store.arrow_reads import arrow_batches, pa
from gymflow.store.memory_bound import VECTOR_ROWS
from gymflow.store.verdict_message import MESSAGE

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


#: SHA-256's block: a longer key is hashed first, a shorter one padded to it (RFC 2104).
_BLOCK = 64


class Sealer:
    """A key's HMAC-SHA256 with its inner and outer states computed once: the seal of one
    message is two SHA-256 compressions of it plus two of a block."""

    def __init__(self, key: SealKey) -> None:
        self._state = hmac.new(key.secret, digestmod="sha256")
        # RFC 2104's two keyed SHA-256 states, for one-message MACs (`digest`): a message costs
        # two C-level hashlib copies, where the `hmac` object's copy is Python-level (0.72
        # against 1.13 us a message; three messages sealed a rollout collected)
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
        string array (`as_seals`)."""
        return as_seals(self.digests(messages))

    def digests(self, messages: Any) -> bytes:
        """The MAC of every message (as `seals`), back to back, `SEAL_HEX // 2` bytes each: what
        a record of a set of them folds (`sealed_rows.Fold`) with no hex read back."""
        digest = self.digest
        return b"".join([digest(message)[: SEAL_HEX // 2] for message in messages.to_pylist()])


def as_seals(digests: bytes) -> Any:
    """MACs given back to back (`Sealer.digests`) as the seals stored, an Arrow string array of
    their hex built from its buffers: `pa.array` over Python values imports pandas (0.7 s of a
    command's start), and one hex of all the digests is faster than one each."""
    count = len(digests) // (SEAL_HEX // 2)
    offsets = np.arange(0, SEAL_HEX * (count + 1), SEAL_HEX, dtype=np.int32)
    data = digests.hex().encode("ascii")
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data))


#: Rows a sealing or checking read takes from DuckDB at once (messages are dropped per batch):
#: one DuckDB vector, whose text the open bounds (`memory_bound.check_text_at_once`); 65,536
#: rows a batch held 32 vectors' text at once, unbounded by it.
SEAL_BATCH = VECTOR_ROWS


def batches(con: DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Iterator[Any]:
    """The rows of `sql` as Arrow record batches (`arrow_reads.arrow_batches`), `SEAL_BATCH`
    at a time."""
    yield from arrow_batches(con, sql, params, SEAL_BATCH)


def sealed(
    con: DuckDBPyConnection, key: SealKey, select: str, params: list[Any] | None = None
) -> Any:
    """The rows `select` gives (its last column the message, `message_sql` AS `MESSAGE`) with
    the message replaced by its seal, as Arrow (`seal`), read batch by batch; None for no rows.
    The key stays in this process: DuckDB gets the seals, never what makes them. The other
    columns are copied out of each batch: a column of a batch DuckDB gave keeps the whole
    batch alive, the messages too (a million verdicts' held 0.85 GiB until the last was
    sealed). A `pyarrow.Table` or None (`Any`: pyarrow has no type stubs)."""
    sealer = key.sealer
    parts: list[Any] = []
    for batch in batches(con, select, params):
        at = batch.schema.get_field_index(MESSAGE)
        columns = [pa.concat_arrays([batch.column(i)]) for i in range(batch.num_columns) if i != at]
        names = [name for i, name in enumerate(batch.schema.names) if i != at]
        parts.append(pa.table([*columns, sealer.seals(batch.column(at))], [*names, "seal"]))
    return pa.concat_tables(parts) if parts else None
