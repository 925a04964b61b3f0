"""The seal on what decides a number besides the verdicts: the tasks (prompt, reference, the
data a verifier reads, tags, difficulty), the run's row (config, repeats, the version it was
judged under), every verifier version with its parameters and code hash, and which version is
current.

A verdict's seal covers the verdict and its rollout, not these. An attacker's pass over 193679f
edited them alone: a lenient what-if version (its parameters copied from the original's) made
the run's version took pass@1 from 57.5% to 100%, healthy; the answer key in `tasks` edited to
the model's wrong answers read healthy, and the next routine reverify sealed verdicts against
it. So every writer that changes one of them checks the MAC of all of them first
(`seal.check_inputs`: a store edited since is refused, nothing written), and writes it again
after (`seal.seal_tasks`); health and `reverify --check` recompute it (`inputs_sealed`).

One MAC over every row (`meta.inputs_seal`), computed outside DuckDB as the verdicts' seals are
(`seal.py`): each value framed as `bytes:text` by DuckDB, the rows read out as Arrow."""

from __future__ import annotations

import hmac
from typing import Any, Protocol

from gymflow.store.arrow_reads import arrow_batches
from gymflow.store.schema import COLUMNS


class SealKey(Protocol):
    """What sealing the inputs needs of `seal.SealKey` (which imports this module): its HMAC
    state."""

    @property
    def sealer(self) -> Any: ...


INPUTS_KEY = "inputs_seal"
#: The verifier version of an import's rewards (`gym import nemo-gym`): the file's, not judged.
IMPORTED_VERSION = "imported"
#: The `meta` keys whose value decides a number (which verifier version is read).
SEALED_META = ("current_verifier_version",)
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


def inputs_mac(con, key: SealKey) -> str:
    """The MAC of every sealed row, in key order."""
    mac = key.sealer.fresh()
    mac.update(b"gymflow sealed inputs v1\n")
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
    for name in SEALED_META:
        row = con.execute("SELECT value FROM meta WHERE key = ?", [name]).fetchone()
        value = b"" if row is None else str(row[0]).encode()
        mac.update(f"{name}={len(value)}:".encode() + value + b"\n")
    return mac.hexdigest()[:_HEX]


def inputs_sealed(con, key: SealKey) -> bool | None:
    """Whether the sealed rows are those the store's writers sealed; None when the store holds
    no such seal (written before it)."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [INPUTS_KEY]).fetchone()
    if row is None:
        return None
    return hmac.compare_digest(str(row[0]), inputs_mac(con, key))


def seal_inputs(con, key: SealKey) -> None:
    con.execute(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [INPUTS_KEY, inputs_mac(con, key)],
    )
