"""The one door to DuckDB: a run's store (`db`, and its typed handle `handle.Store`), its schema
(`schema`), the SQL against its tables (`queries`: nothing outside this package names a table),
the rows each table takes (`rows`, `writer`), runs, verifier versions, seals, snapshots, merges,
compaction and remote shard roots.

Cut-off: reads and writes stores; judges nothing and runs no model. Tier 1, beside `models` and
`verifiers`."""

# pyright: reportUnsupportedDunderAll=false
# (`__all__` names the public modules without importing them: see pyproject.toml)

__tier__ = 1

__all__ = [
    "arrow_reads",
    "checked_stores",
    "column_statistics",
    "commits",
    "compact",
    "db",
    "exact_schema",
    "generations",
    "handle",
    "memory_bound",
    "merge",
    "migration",
    "named_paths",
    "queries",
    "remote",
    "rows",
    "runs",
    "schema",
    "seal",
    "seal_key",
    "sealed_files",
    "sealed_first",
    "sealed_inputs",
    "sealed_rows",
    "sealed_stores",
    "server_reports",
    "snapshot",
    "store_ids",
    "stored_values",
    "superseded",
    "tool_lists",
    "unjudged",
    "verdict_message",
    "verifier_versions",
    "writer",
]
