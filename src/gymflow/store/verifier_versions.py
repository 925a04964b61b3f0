"""Which verifier version a run is read under: the version it was judged under, until the user
makes another one current (`gym eval reverify --make-current`, `gym eval use-version`).

A reverify adds a version beside the others; it never silently becomes what profile, diagnose,
reports, history and data read. The choice lives in the `meta` table (key
`current_verifier_version`), so it needs no column of its own; a store without that key reads
the version its `runs` row names (the one it was judged under), or, for a run stored without
verdicts (an import judged later), the first version it got."""

from __future__ import annotations

from gymflow.store.db import StoreError, transaction
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.sealed_first import check_before_writing

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


def make_current(con, version: str) -> None:
    """Read `version` from now on; raises StoreError for a version the store does not hold."""
    stored = stored_versions(con)
    if version not in stored:
        raise StoreError(
            f"no verifier version {version!r} in this store (have: {', '.join(stored) or 'none'})"
        )
    where = "run store"
    check_before_writing(con, where)
    # the choice decides every number read: sealed with the run's inputs (store/sealed_inputs.py),
    # in the same transaction, so a kill between them cannot leave inputs that read as edited
    with transaction(con):
        con.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [CURRENT_KEY, version],
        )
        seal_tasks(con, claim(con, where))
