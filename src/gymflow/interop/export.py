"""Writing a run's rollouts out: NeMo Gym rollout JSONL, flat JSONL, Parquet, or a folder of ATIF
trajectories (one file per rollout, `interop.atif_files`).

Every format is produced by SQL over the store; one row per rollout with its verification under
one verifier version (the newest unless given). The NeMo Gym format writes scored rollouts, with
failed ones and every requested rollout in NeMo Gym's two sidecar files (`nemo_export`); the flat
formats hold every stored rollout."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from gymflow.analysis.outcomes import check_verifier_version
from gymflow.core.written import WriteError, written
from gymflow.core.written import target as write_target
from gymflow.interop.atif_files import write_atif
from gymflow.interop.nemo_export import write_nemo_gym
from gymflow.interop.nemo_read import InteropError
from gymflow.store.db import connect, store_path
from gymflow.store.queries.exports import flat_rollouts_sql, sql_literal
from gymflow.store.sealed_first import check_before_writing

Format = Literal["nemo-gym", "jsonl", "parquet", "atif"]
FORMATS: tuple[Format, ...] = ("nemo-gym", "jsonl", "parquet", "atif")
DEFAULT_NAMES = {
    "nemo-gym": "rollouts.nemo-gym.jsonl",
    "jsonl": "rollouts.jsonl",
    "parquet": "rollouts.parquet",
    "atif": "atif",  # a folder
}


def _check_target(target: Path) -> None:
    """An `--out` that cannot be written is one line naming it, before the store is opened: a
    folder or special file (gymflow.core.written), a parent that is no folder or not writable."""
    try:
        write_target(target)
    except WriteError as exc:
        raise InteropError(str(exc)) from None
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise InteropError(f"{parent}: not a folder; cannot write {target.name} in it")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InteropError(f"{parent}: cannot create the folder: {exc.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise InteropError(f"{parent}: not writable (read-only folder?); choose another --out")


def export_run(
    run_dir: Path | str,
    fmt: Format,
    *,
    out: Path | None = None,
    verifier_version: str | None = None,
) -> dict[str, Any]:
    """Write the run's rollouts to `out` (default: RUN_DIR/<DEFAULT_NAMES[fmt]>), replacing a
    file of that name.

    Returns {"format", "path", "rows", "verifier_version"} (and, for nemo-gym, the sidecars'
    counts and paths). Raises InteropError for an `out` that cannot be written."""
    if fmt not in FORMATS:
        raise InteropError(f"unknown export format {fmt!r} (formats: {', '.join(FORMATS)})")
    target = Path(out) if out else Path(run_dir) / DEFAULT_NAMES[fmt]
    _check_target(target / "x.json" if fmt == "atif" else target)
    con = connect(run_dir, read_only=True)
    try:
        # an export is what `gym import` seals afresh elsewhere: an edited store is refused
        # (store/sealed_first.py), as every writer refuses to build on one
        check_before_writing(con, str(store_path(run_dir)))
        version = check_verifier_version(con, verifier_version)
        extra: dict[str, Any] = {}
        if fmt == "nemo-gym":
            extra = write_nemo_gym(con, version, target)
            rows = extra.pop("rows")
        elif fmt == "atif":
            rows = write_atif(con, version, target)
        else:
            sql = flat_rollouts_sql(version, nested_json=fmt == "jsonl")
            con.execute(f"CREATE OR REPLACE TEMP VIEW export_rows AS {sql}")
            options = "FORMAT json" if fmt == "jsonl" else "FORMAT parquet"
            with written(target) as (staged,):
                con.execute(
                    f"COPY (SELECT * FROM export_rows) TO {sql_literal(str(staged))} ({options})"
                )
            rows = con.execute("SELECT count(*) FROM export_rows").fetchone()[0]
    except OSError as exc:
        raise InteropError(f"{exc.filename or target}: cannot write: {exc.strerror}") from None
    finally:
        con.close()
    return {"format": fmt, "path": str(target), "rows": rows, "verifier_version": version, **extra}
