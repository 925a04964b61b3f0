"""The model server's report about itself (`gymflow.models.server_info`), kept in the store's
`meta` table under SERVER_KEY: one per store, as a store holds one run. The newest report wins
(a resumed run against another server is another server, and says so)."""

from __future__ import annotations

import json
from typing import Any

from duckdb import DuckDBPyConnection

from gymflow.core.json_text import parse

SERVER_KEY = "server_report"


def record_server_report(con, report: dict[str, Any]) -> None:
    """Keep `report` (nothing when it is empty: a server that reports nothing)."""
    if not report:
        return
    con.execute(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [SERVER_KEY, json.dumps(report, sort_keys=True)],
    )


def server_report(con: DuckDBPyConnection) -> dict[str, Any] | None:
    """The kept report, or None (a store written before, a server that reported nothing)."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [SERVER_KEY]).fetchone()
    if not row:
        return None
    try:
        value = parse(row[0])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
