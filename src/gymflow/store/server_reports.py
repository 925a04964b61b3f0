"""The model server's report about itself (`gymflow.models.server_info`), kept in the store's
`meta` table under SERVER_KEY: one per store, as a store holds one run. The newest report wins
(a resumed run against another server is another server, and says so).

It is among the run's sealed inputs (`sealed_inputs.SEALED_META`): `profile --compare` names
the server's model and engine among the factors two runs differ in, so an edited report turned
"only sampling.seed differs" into "3 factors differ" (attack pass 4, a05). It is written with
the inputs' seal, in one transaction, as every input is."""

from __future__ import annotations

import json
from typing import Any

from duckdb import DuckDBPyConnection

from gymflow.core.json_text import parse
from gymflow.store.db import transaction
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.sealed_inputs import SERVER_REPORT_KEY

SERVER_KEY = SERVER_REPORT_KEY


def record_server_report(con: DuckDBPyConnection, report: dict[str, Any], where: str) -> None:
    """Keep `report` (nothing when it is empty: a server that reports nothing), sealed with the
    inputs; `where` names the store in a refusal (a store sealed with another key)."""
    if not report:
        return
    with transaction(con):
        con.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [SERVER_KEY, json.dumps(report, sort_keys=True)],
        )
        seal_tasks(con, claim(con, where))


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
