"""Opening a run store: schema creation, version checks, and clear errors for broken files."""

from __future__ import annotations

from pathlib import Path

import duckdb

from gymflow.store.schema import SCHEMA_VERSION, TABLES

STORE_FILE = "gymflow.duckdb"


class StoreError(RuntimeError):
    """A store that cannot be opened or does not match what the caller expects."""


def store_path(run_dir: Path | str) -> Path:
    path = Path(run_dir)
    return path if path.suffix == ".duckdb" else path / STORE_FILE


def connect(run_dir: Path | str, *, create: bool = False, read_only: bool = False):
    """Open the store of a run directory. `create` makes the directory and schema if absent."""
    path = store_path(run_dir)
    if not path.exists():
        if not create:
            raise StoreError(f"{path}: no gymflow store here (run `gym eval run` first?)")
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(path), read_only=read_only and path.exists())
    except duckdb.IOException as exc:
        raise StoreError(f"{path}: cannot open store: {exc}") from None
    except duckdb.Error as exc:
        raise StoreError(
            f"{path}: not a readable DuckDB store (truncated or corrupt?): {exc}"
        ) from None
    if read_only:
        _check_version(con, path)
        return con
    for ddl in TABLES.values():
        con.execute(ddl)
    stored = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if stored is None:
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    else:
        _check_version(con, path)
    return con


def _check_version(con, path: Path) -> None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        raise StoreError(
            f"{path}: a DuckDB file, but not a gymflow store (no meta table)"
        ) from None
    if row is None or int(row[0]) != SCHEMA_VERSION:
        found = row[0] if row else "none"
        raise StoreError(
            f"{path}: store schema version {found}, this gymflow reads {SCHEMA_VERSION}"
        )
