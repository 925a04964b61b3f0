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

The MAC is HMAC-SHA256 computed in DuckDB's SQL (`seal_sql`), truncated to 128 bits: one
expression every writer inserts with and the checks recompute, so no verdict crosses into Python
to be sealed (a reverify writes 100,000 a second). The key's inner and outer pads reach the SQL
as session variables (`arm`); the key itself never appears in a statement.

Which key sealed a store is in its `meta` table (`seal`: key id, the count of verdicts written
before the store was first sealed, and a MAC of both): a writer holding another key refuses to
write, so one store never mixes keys."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from gymflow.core.errors import UserError
from gymflow.store.db import first_sql

SEAL_KEY_ENV = "GYMFLOW_SEAL_KEY"
#: Bytes of a key made on first use, and the fewest a given key may have.
KEY_BYTES = 32
MIN_KEY_BYTES = 16
#: Hex characters of a seal kept: HMAC-SHA256 truncated to 128 bits (RFC 2104 allows it).
SEAL_HEX = 32
_BLOCK = 64  # SHA-256's block size, the HMAC pad length


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
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def pads(self) -> tuple[bytes, bytes]:
        """HMAC's inner and outer keys (RFC 2104): what `seal_sql` hashes the message with."""
        key = hashlib.sha256(self.secret).digest() if len(self.secret) > _BLOCK else self.secret
        key = key.ljust(_BLOCK, b"\0")
        return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def key_file() -> Path:
    """`$XDG_CONFIG_HOME/gymflow/seal.key` (by default `~/.config/gymflow/seal.key`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gymflow" / "seal.key"


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


# -- the seal in SQL ------------------------------------------------------------------------


def _framed(column: str) -> str:
    """A value as `bytes:text` (NULL as a bare `:`; `concat` skips NULLs): no two messages of
    other values read alike. One `concat` builds the whole message: a chain of `||` copied it
    once per field, a third of the seal's cost."""
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


def seal_sql(verdict: str, rollout: str, prefix: str = "") -> str:
    """THE seal of a verdict: SQL over a relation `verdict` holding the verdict's columns and
    `rollout` holding its rollout's `SEALED_ROLLOUT` columns, each named with `prefix` (one
    relation may be both, the rollout's columns then prefixed apart from the verdict's). Needs
    `arm(con, key)` on the connection; unarmed, it is NULL."""
    parts = [_framed(f"{verdict}.{name}") for name in SEALED_VERDICT]
    # a number and a boolean hold no `|`: as text, NULL as nothing
    parts += [f"{verdict}.reward", f"{verdict}.passed"]
    parts += [_framed(f"{rollout}.{prefix}{name}") for name in SEALED_ROLLOUT]
    message = "concat(" + ", '|', ".join(parts) + ")"
    inner = f"sha256(getvariable('gymflow_seal_ipad') || encode({message}))"
    return f"left(sha256(getvariable('gymflow_seal_opad') || unhex({inner})), {SEAL_HEX})"


def arm(con, key: SealKey) -> None:
    """Give the connection the key's pads, as session variables `seal_sql` reads."""
    inner, outer = key.pads()
    con.execute("SET VARIABLE gymflow_seal_ipad = ?::BLOB", [inner])
    con.execute("SET VARIABLE gymflow_seal_opad = ?::BLOB", [outer])


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


def _record(key: SealKey, legacy: int) -> str:
    body = f"{key.key_id}:{legacy}"
    return f"{body}:{key.mac('gymflow store seal ' + body)[:SEAL_HEX]}"


def _has_seal_column(con) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
            "AND table_name = 'verifications' AND column_name = 'seal'"
        ).fetchone()[0]
    )


def _sealed_by(con, key: SealKey) -> bool:
    """Whether any stored verdict carries `key`'s seal (arms `con` with it)."""
    if not _has_seal_column(con):
        return False
    arm(con, key)
    return con.execute(
        "SELECT EXISTS (SELECT 1 FROM verifications v JOIN rollouts r USING (rollout_id) "
        f"WHERE v.seal = {seal_sql('v', 'r')})"
    ).fetchone()[0]


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


def _store_path(con) -> str | None:
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return os.path.realpath(row[0]) if row and row[0] else None


def _entry(key: SealKey, path: str) -> str:
    return f"{key.key_id}\t{path}\n"


def _remember(con, key: SealKey) -> None:
    path, ledger = _store_path(con), ledger_file()
    if path is None:
        return
    try:
        ledger.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot record the sealed store: {exc.strerror}") from None
    with os.fdopen(fd, "a") as out:  # one short append: whole even beside another writer
        out.write(_entry(key, path))


def _remembered(con, key: SealKey) -> bool:
    path, ledger = _store_path(con), ledger_file()
    if path is None or not ledger.exists():
        return False
    try:
        info = ledger.stat()
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
            raise SealKeyError(f"{ledger}: writable by others or not this user's; refused")
        with ledger.open(encoding="utf-8", errors="replace") as lines:
            return _entry(key, path) in lines
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot read the sealed stores: {exc.strerror}") from None


STRIPPED = (
    "this machine sealed this store, and it now reads as unsealed or sealed by another key: "
    "its seals or seal record were removed or rewritten in the file (or another store was put "
    "at this path: then move that one to a folder of its own)"
)


def store_seal(con, key: SealKey | None) -> StoreSeal:
    """Which key sealed the store `con` (`_seal_record`), and `stripped` when that reads as
    unsealed or foreign at a path this machine's key sealed."""
    found = _seal_record(con, key)
    if found.state in ("unsealed", "foreign") and key is not None and _remembered(con, key):
        return StoreSeal("stripped", key.key_id)
    return found


def _seal_record(con, key: SealKey | None) -> StoreSeal:
    """Which key sealed the store `con`, and how many of its verdicts predate the seal. A
    record whose MAC does not verify under this machine's key (an edited count) grants no
    verdict leave to be unsealed."""
    row = con.execute("SELECT value FROM meta WHERE key = 'seal'").fetchone()
    if row is None:
        sealed_any = (
            _has_seal_column(con)
            and con.execute("SELECT count(*) FROM verifications WHERE seal IS NOT NULL").fetchone()[
                0
            ]
        )
        if not sealed_any:
            return StoreSeal("unsealed", None)
        # seals without a record: the record was deleted; this key checks them, none unsealed
        return StoreSeal("sealed" if key else "foreign", key.key_id if key else None)
    key_id, _, rest = str(row[0]).partition(":")
    if key is None:
        return StoreSeal("foreign", key_id)
    if key_id != key.key_id:
        # a record naming another key over seals this key made was edited, to make every
        # check skip them (`seal_key_unknown`, a warning): this key checks them, none unsealed
        return (
            StoreSeal("sealed", key.key_id)
            if _sealed_by(con, key)
            else StoreSeal("foreign", key_id)
        )
    legacy_text = rest.partition(":")[0]
    legacy = int(legacy_text) if legacy_text.isdigit() and len(legacy_text) < 19 else 0
    return StoreSeal("sealed", key_id, legacy if _record(key, legacy) == row[0] else 0)


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


def _task_list_mac(con, key: SealKey) -> str:
    runs = con.execute(
        "SELECT run_id, string_agg(task_id, chr(10) ORDER BY task_id) FROM tasks "
        "GROUP BY run_id ORDER BY run_id"
    ).fetchall()
    listing = "\n\n".join(f"{len(str(run))}:{run}\n{ids}" for run, ids in runs)
    return key.mac("gymflow task list\n" + listing)[:SEAL_HEX]


def seal_tasks(con, key: SealKey) -> None:
    """Seal the task list the store holds now (after a writer added tasks)."""
    con.execute(
        "INSERT INTO meta VALUES ('task_seal', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [_task_list_mac(con, key)],
    )


def task_list_sealed(con, key: SealKey) -> bool:
    """Whether the store's task list is the one its writers sealed (a task deleted or added
    in the file, or the seal removed, is not)."""
    row = con.execute("SELECT value FROM meta WHERE key = 'task_seal'").fetchone()
    return row is not None and hmac.compare_digest(str(row[0]), _task_list_mac(con, key))


def claim(con, where: str, *, legacy_added: int = 0) -> SealKey:
    """The key a writer seals with, armed on `con`, with the store's seal record written (in
    the caller's transaction). A store sealed with another key is refused: one store, one key.
    `legacy_added`: unsealed verdicts the caller just copied in (a shard from before the
    seal), read as written before the seal rather than as tampered."""
    key = load_key(create=True)
    assert key is not None
    found = store_seal(con, key)
    held = con.execute("SELECT count(*) FROM verifications").fetchone()[0]
    if found.state == "stripped" and held:
        raise SealKeyError(f"{where}: {STRIPPED}; nothing written")
    if found.state == "foreign":
        raise SealKeyError(foreign_key_message(where, found.key_id, key))
    first = found.state in ("unsealed", "stripped")  # stripped of nothing: a failed first write
    legacy = held if first else found.legacy + legacy_added
    if first or legacy_added:
        con.execute(
            "INSERT INTO meta VALUES ('seal', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [_record(key, legacy)],
        )
    if first:
        _remember(con, key)
        seal_tasks(con, key)
    arm(con, key)
    return key


# -- checking --------------------------------------------------------------------------------

#: Verdicts whose seal is not the one their fields and rollout give under this machine's key
#: (`getvariable('seal_legacy')`: how many may be unsealed, written before the seal).
MISMATCH_SQL = f"""
SELECT v.rollout_id AS id FROM verifications v LEFT JOIN rollouts r USING (rollout_id)
WHERE CASE WHEN v.seal IS NULL
           THEN (SELECT count(*) FROM verifications WHERE seal IS NULL)
                > getvariable('seal_legacy')::BIGINT
           ELSE v.seal <> {seal_sql("v", "r")} END
"""


@dataclass(frozen=True)
class SealCheck:
    store: StoreSeal
    #: verdicts whose seal does not match (None: not checked, the key is not this machine's)
    mismatched: int | None
    examples: list[str]


def armed_state(con) -> StoreSeal:
    """Which key sealed the store; when this machine's, the connection is armed to check it
    (`MISMATCH_SQL`'s variables set). Never makes a key: a check without one says so."""
    found = store_seal(con, key := load_key(create=False))
    if found.state == "sealed" and key is not None:
        arm(con, key)
        con.execute("SET VARIABLE seal_legacy = ?", [found.legacy])
        return replace(found, tasks_sealed=task_list_sealed(con, key))
    return found


def check_seals(con, max_examples: int = 10) -> SealCheck:
    """Recompute every verdict's seal in SQL (writes nothing but session variables)."""
    found = armed_state(con)
    if found.state == "stripped":
        count, examples = con.execute(
            f"SELECT count(*), {first_sql('rollout_id', 'rollout_id', max_examples)} "
            "FROM verifications"
        ).fetchone()
        return SealCheck(found, count, examples or [])
    if found.state != "sealed":
        return SealCheck(found, None, [])
    count, examples = con.execute(
        f"SELECT count(*), {first_sql('id', 'id', max_examples)} FROM ({MISMATCH_SQL})"
    ).fetchone()
    return SealCheck(found, count, examples or [])
