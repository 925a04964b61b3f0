"""Where a training file came from, stored with it: Parquet key-value metadata under
`gymflow.provenance`, and for JSONL a sidecar `NAME.meta.json` beside `NAME.jsonl` (a header line
would break readers that expect every line to be a row)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymflow import __version__
from gymflow.store.runs import run_info

PARQUET_KEY = "gymflow.provenance"
_RUN_FIELDS = (
    "run_id",
    "benchmark",
    "benchmark_version",
    "environment",
    "dataset_version",
    "split",
    "model",
    "harness",
    "config_hash",
)


def provenance(
    con,
    *,
    kind: str,
    store: Path | str,
    verifier_version: str,
    filters: dict[str, Any],
    counts: dict[str, Any],
) -> dict[str, Any]:
    """The record written with every selection or export."""
    run = run_info(con)
    return {
        "kind": kind,
        "gymflow_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "store": str(Path(store).resolve()),
        "run": {name: getattr(run, name) for name in _RUN_FIELDS},
        "verifier_version": verifier_version,
        "filters": filters,
        "counts": counts,
    }


def sidecar_path(path: Path) -> Path:
    """`selection.jsonl` -> `selection.meta.json`."""
    return path.with_name(path.name.split(".")[0] + ".meta.json")


def sidecar_text(record: dict[str, Any]) -> str:
    """The `.meta.json` sidecar's text."""
    return json.dumps(record, indent=2, default=str) + "\n"


def parquet_metadata_sql(record: dict[str, Any]) -> str:
    """The `KV_METADATA` option of a DuckDB `COPY ... (FORMAT parquet)` holding `record`."""
    text = json.dumps(record, default=str).replace("'", "''")
    return f"KV_METADATA {{'{PARQUET_KEY}': '{text}'}}"


def read_provenance(path: Path) -> dict[str, Any]:
    """The provenance of a file this package wrote (Parquet metadata, or the JSONL's sidecar)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        metadata = pq.read_schema(path).metadata or {}
        return json.loads(metadata[PARQUET_KEY.encode()])
    return json.loads(sidecar_path(path).read_text(encoding="utf-8"))
