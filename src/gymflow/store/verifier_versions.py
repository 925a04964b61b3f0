"""Which verifier version a run is read under: the version it was judged under, until the user
makes another one current (`gym eval reverify --make-current`, `gym eval use-version`).

A reverify adds a version beside the others; it never silently becomes what profile, diagnose,
reports, history and data read. The choice lives in the `meta` table (key
`current_verifier_version`), so it needs no column of its own; a store without that key reads
the version its `runs` row names (the one it was judged under), or, for a run stored without
verdicts (an import judged later), the first version it got."""

from __future__ import annotations

import duckdb

from gymflow.store.db import StoreError, transaction
from gymflow.store.handle import Connection
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.sealed_first import check_before_writing
from gymflow.store.sealed_stores import store_file

CURRENT_KEY = "current_verifier_version"


def stored_versions(con) -> list[str]:
    """Every verifier version in the store, oldest first."""
    rows = con.execute(
        "SELECT verifier_version FROM verifier_versions ORDER BY created_at, verifier_version"
    ).fetchall()
    return [row[0] for row in rows]


def current_verifier_version(con) -> str:
    stored = stored_versions(con)
    if not stored:
        raise StoreError("store holds no verifier version")
    chosen = con.execute("SELECT value FROM meta WHERE key = ?", [CURRENT_KEY]).fetchone()
    if chosen is not None and chosen[0] in stored:
        return chosen[0]
    judged = con.execute("SELECT verifier_version FROM runs LIMIT 1").fetchone()
    if judged is not None and judged[0] in stored:
        return judged[0]
    return stored[0]


def make_current(con: duckdb.DuckDBPyConnection, version: str) -> None:
    """Read `version` from now on; raises StoreError for a version the store does not hold."""
    stored = stored_versions(con)
    if version not in stored:
        raise StoreError(
            f"no verifier version {version!r} in this store (have: {', '.join(stored) or 'none'})"
        )
    where = store_file(con) or "run store"  # a refusal names the file
    check_before_writing(con, where)
    # the choice decides every number read: sealed with the run's inputs (store/sealed_inputs.py),
    # in the same transaction, so a kill between them cannot leave inputs that read as edited
    with transaction(con):
        con.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [CURRENT_KEY, version],
        )
        seal_tasks(con, claim(con, where))


def verifier_name(con: Connection, version: str) -> str | None:
    """The verifier's name a stored version records, or None for a version not stored here."""
    row = con.execute(
        "SELECT verifier_name FROM verifier_versions WHERE verifier_version = ?", [version]
    ).fetchone()
    return row[0] if row else None


def version_record(con: Connection, version: str) -> tuple[str, str | None, str | None]:
    """(verifier_name, params_json, source) of a stored version; StoreError for another."""
    row = con.execute(
        "SELECT verifier_name, params_json, source FROM verifier_versions "
        "WHERE verifier_version = ?",
        [version],
    ).fetchone()
    if row is None:
        raise StoreError(f"no verifier version {version!r} in this store")
    name, params, source = row
    return name, params, source


def version_with_code(con: Connection, version: str) -> tuple[str, str | None, str | None] | None:
    """(verifier_name, params_json, code_hash) of a stored version; None for another."""
    row = con.execute(
        "SELECT verifier_name, params_json, code_hash FROM verifier_versions "
        "WHERE verifier_version = ?",
        [version],
    ).fetchone()
    if row is None:
        return None
    name, params, code = row
    return name, params, code
