"""The seal on what decides a number besides the verdicts: the tasks (prompt, reference, the
data a verifier reads, tags, difficulty), the run's row (config, repeats, the version it was
judged under), every verifier version with its parameters and code hash, which version is
current, and the model server's report of itself (`server_reports.py`, from inputs MAC version 2).

A verdict's seal covers the verdict and its rollout, not these. An attacker's pass over 193679f
edited them alone: a lenient what-if version (its parameters copied from the original's) made
the run's version took pass@1 from 57.5% to 100%, healthy; the answer key in `tasks` edited to
the model's wrong answers read healthy, and the next routine reverify sealed verdicts against
it. So every writer that changes one of them checks the MAC of all of them first
(`seal.check_inputs`: a store edited since is refused, nothing written), and writes it again
after (`seal.seal_tasks`); health and `reverify --check` recompute it (`inputs_sealed`).

One MAC over every row (`meta.inputs_seal`), computed outside DuckDB as the verdicts' seals are
(`seal.py`): each value framed as `bytes:text` by DuckDB, the rows read out as Arrow.

An import (its only verifier version `imported`) also seals which of its completed rollouts it
stored without a verdict (`meta.unjudged_seal`: their count and a MAC of their ids), the rows of
the file without a reward, never judged. Every other writer stores a rollout with its verdict,
so there a completed rollout without one is a deletion (`sealed_first.py`); in an import it
could not be told from a row never judged, and a verdict deleted read as merely missing (second
attacker's pass over 84b21e2). The record is part of the inputs' MAC when present, so it cannot
be removed either; a store imported before it has none and is read as before."""

from __future__ import annotations

from typing import Any, Protocol

from duckdb import DuckDBPyConnection

from gymflow.core.same_text import same_text
from gymflow.store.arrow_reads import arrow_batches
from gymflow.store.generations import write_generation
from gymflow.store.schema import COLUMNS


class SealKey(Protocol):
    """What sealing the inputs needs of `seal.SealKey` (which imports this module): its HMAC
    state, its id and MAC (the store's generation, `generations.py`)."""

    @property
    def sealer(self) -> Any: ...

    @property
    def key_id(self) -> str: ...

    def mac(self, text: str) -> str: ...


INPUTS_KEY = "inputs_seal"
#: The verifier version of an import's rewards (`gym import nemo-gym`): the file's, not judged.
IMPORTED_VERSION = "imported"
#: The `meta` key of an import's sealed list of rollouts stored without a verdict.
UNJUDGED_KEY = "unjudged_seal"
#: Completed rollouts with no verdict of any version, by id.
UNJUDGED_SQL = """
    SELECT r.rollout_id FROM rollouts r
    WHERE r.status = 'completed'
      AND NOT EXISTS (SELECT 1 FROM verifications v WHERE v.rollout_id = r.rollout_id)
    ORDER BY r.rollout_id
"""
#: The model server's report of itself (`server_reports.py`): which server, model and engine
#: answered, a factor `profile --compare` attributes a difference to.
SERVER_REPORT_KEY = "server_report"
#: The `meta` keys whose value decides a number or a sentence of advice, by the version of the
#: inputs' MAC: which verifier version is read (1); and the server's report (2, written with
#: seal record version 5): two runs differing only in their seed read "3 factors differ" once
#: their reports were edited, every seal intact (attack pass 4, a05).
SEALED_META = {1: ("current_verifier_version",), 2: ("current_verifier_version", SERVER_REPORT_KEY)}
#: The inputs' MAC a writer seals with.
INPUTS_VERSION = 2
#: Each sealed table with the columns that order its rows (its key).
SEALED_TABLES = {
    "runs": ("run_id",),
    "tasks": ("run_id", "task_id"),
    "verifier_versions": ("verifier_version",),
}
_HEX = 32


def framed(column: str) -> str:
    """A value as `bytes:text` (NULL as a bare `:`; `concat` skips NULLs): no two messages of
    other values read alike."""
    text = f"{column}::VARCHAR"
    return f"strlen({text}), ':', {text}"


def _rows_sql(table: str, key: tuple[str, ...], present: set[str]) -> str:
    # a column an older store lacks (code_hash before it was added) reads as NULL, as the
    # stand-in a reader gets does
    parts = [framed(c if c in present else "NULL") for c in COLUMNS[table]]
    return (
        f"SELECT encode(concat({', chr(31), '.join(parts)})) FROM {table} ORDER BY {', '.join(key)}"
    )


def inputs_mac(con: DuckDBPyConnection, key: SealKey, version: int = INPUTS_VERSION) -> str:
    """The MAC of every sealed row, in key order, and of the `meta` values `version` seals."""
    mac = key.sealer.fresh()
    mac.update(f"gymflow sealed inputs v{version}\n".encode())
    present: dict[str, set[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() "
        "WHERE database_name = current_database()"
    ).fetchall():
        present.setdefault(table, set()).add(column)
    for table, order in SEALED_TABLES.items():
        mac.update(f"\x1e{table}\n".encode())
        reader = arrow_batches(con, _rows_sql(table, order, present.get(table, set())))
        for batch in reader:
            for row in batch.column(0).to_pylist():
                mac.update(b"%d:" % len(row) + row + b"\n")
    mac.update(b"\x1emeta\n")
    for name in SEALED_META[version]:
        row = con.execute("SELECT value FROM meta WHERE key = ?", [name]).fetchone()
        value = b"" if row is None else str(row[0]).encode()
        mac.update(f"{name}={len(value)}:".encode() + value + b"\n")
    # only when present: a store sealed before the record existed keeps its MAC
    row = con.execute("SELECT value FROM meta WHERE key = ?", [UNJUDGED_KEY]).fetchone()
    if row is not None:
        value = str(row[0]).encode()
        mac.update(f"{UNJUDGED_KEY}={len(value)}:".encode() + value + b"\n")
    return mac.hexdigest()[:_HEX]


def imported_only(con: DuckDBPyConnection) -> bool:
    """Whether the store's only verifier version is an import's."""
    versions = {
        row[0] for row in con.execute("SELECT verifier_version FROM verifier_versions").fetchall()
    }
    return bool(versions) and versions <= {IMPORTED_VERSION}


def unjudged_record(con: DuckDBPyConnection, key: SealKey) -> str:
    """The count and MAC of the completed rollouts the store holds without a verdict."""
    mac = key.sealer.fresh()
    mac.update(b"gymflow unjudged rollouts v1\n")
    count = 0
    for batch in arrow_batches(con, UNJUDGED_SQL):
        for rollout_id in batch.column(0).to_pylist():
            text = str(rollout_id).encode()
            mac.update(b"%d:" % len(text) + text + b"\n")
            count += 1
    return f"{count}:{mac.hexdigest()[:_HEX]}"


def unjudged_sealed(con: DuckDBPyConnection, key: SealKey) -> tuple[int, int] | None:
    """For an import holding the record, when its rollouts without a verdict are not the ones
    it stored so: (how many it stored, how many there are now); else None."""
    if not imported_only(con):
        return None
    row = con.execute("SELECT value FROM meta WHERE key = ?", [UNJUDGED_KEY]).fetchone()
    if row is None:
        return None
    now = unjudged_record(con, key)
    if same_text(str(row[0]), now):
        return None
    stored = str(row[0]).partition(":")[0]
    return (int(stored) if stored.isdigit() else -1, int(now.partition(":")[0]))


def inputs_sealed(
    con: DuckDBPyConnection, key: SealKey, versions: tuple[int, ...] = (INPUTS_VERSION,)
) -> bool | None:
    """Whether the sealed rows are those the store's writers sealed, under one of the MAC's
    `versions` (the one its seal record says: `seal._inputs_versions`); None when the store
    holds no such seal (written before it)."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [INPUTS_KEY]).fetchone()
    if row is None:
        return None
    same = any(same_text(str(row[0]), inputs_mac(con, key, version)) for version in versions)
    return same and (unjudged_sealed(con, key) is None)


def seal_inputs(con: DuckDBPyConnection, key: SealKey) -> None:
    """Seal the inputs as they are now; an import's rollouts without a verdict first."""
    if imported_only(con):
        con.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [UNJUDGED_KEY, unjudged_record(con, key)],
        )
    con.execute(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [INPUTS_KEY, inputs_mac(con, key)],
    )
    write_generation(con, key)
