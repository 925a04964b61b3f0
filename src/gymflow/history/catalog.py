"""The catalog of the runs under a root folder: one row per run store, in a DuckDB file of its own.

The run stores stay the truth; the catalog is a summary rebuilt from them (a row is recomputed
only when its store changed on disk), so it can be deleted at any time. It lives in the user's
cache folder (`$XDG_CACHE_HOME/gymflow/catalogs`, one file per root), never in the run folder:
listing runs writes nothing where the runs are (it wrote `catalog.duckdb` there, into a folder
others may share or a read-only one). Any SQL client can query it. A cache that cannot be used
(no private cache folder, a file another listing holds or cannot read) means the summary is
computed in memory, from the stores, as on a first listing."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from pathlib import Path

import duckdb

from gymflow.analysis.outcomes import check_verifier_version
from gymflow.analysis.profile import headline
from gymflow.analysis.seals import store_seals
from gymflow.core.errors import GymflowError
from gymflow.core.trees import walk
from gymflow.core.user_folders import private_folder, user_cache
from gymflow.store.db import (
    STORE_FILE,
    StoreError,
    connect,
    transaction,
    without_progress_bar,
)
from gymflow.store.runs import run_info

#: Shard stores are parts of a run, merged into its store: not runs of their own.
SHARD_FOLDER = "shards"
#: How deep under the root run stores are looked for (a nightly layout is root/benchmark/date).
MAX_DEPTH = 6


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One run: what it was (the factors a comparison names) and how it did (its headline)."""

    run_dir: str
    run_id: str
    created_at: datetime | None
    benchmark: str | None
    benchmark_version: str | None
    environment: str | None
    dataset_version: str | None
    model: str | None
    harness: str | None
    prompt_template: str | None
    sampling_json: str | None
    repeats: int | None
    verifier_version: str | None
    pass1: float | None
    ci_low: float | None
    ci_high: float | None
    expected: int
    scored: int
    failed: int
    missing: int
    #: what the store's seals say (`analysis.seals`): `intact`, `edited` (pass@1 and its CI are
    #: then None: a forged store listed 100% for an honest 60%), `unsealed` or `foreign`
    seals: str
    #: what does not match, for an `edited` store
    seals_edited: str | None
    #: the store file's size, modification and change time when this row was computed (the
    #: change time cannot be set back: a store edited with its size and mtime kept is read again)
    store_bytes: int
    store_mtime: float
    store_ctime: float


COLUMNS = [f.name for f in fields(CatalogEntry)]
#: the DuckDB type of each annotation used above (annotations are strings under `annotations`)
_TYPES = {
    "datetime | None": "TIMESTAMP",
    "int": "BIGINT",
    "int | None": "BIGINT",
    "float": "DOUBLE",
}
_TYPES |= {"str": "VARCHAR", "str | None": "VARCHAR", "float | None": "DOUBLE"}
_DDL = "CREATE TABLE IF NOT EXISTS runs ({})".format(
    ", ".join(f"{f.name} {_TYPES[f.type]}" for f in fields(CatalogEntry))
)


def find_stores(root: Path) -> Iterator[Path]:
    """Every run directory under `root` (itself included), shard stores left out."""
    root = root.resolve()
    for folder, subfolders, files in walk(root, MAX_DEPTH):
        subfolders[:] = sorted(d for d in subfolders if d != SHARD_FOLDER and not d.startswith("."))
        if STORE_FILE in files:
            yield Path(folder)


def read_entry(run_dir: Path) -> CatalogEntry:
    """Summarise one run store (read-only). Raises StoreError when it cannot be read."""
    path = run_dir / STORE_FILE
    stat = path.stat()
    try:
        with connect(run_dir, read_only=True) as con:
            run = run_info(con)
            version = check_verifier_version(con, None)
            head = headline(con, version)
            seals = store_seals(con)
    except duckdb.Error as exc:
        raise StoreError(f"{path}: cannot read ({exc})") from None
    edited = seals.intact is False
    low, high = (None, None) if edited else head.ci95 or (None, None)
    cover = head.coverage
    return CatalogEntry(
        run_dir=str(run_dir),
        run_id=run.run_id,
        created_at=run.created_at,
        benchmark=run.benchmark,
        benchmark_version=run.benchmark_version,
        environment=run.environment,
        dataset_version=run.dataset_version,
        model=run.model,
        harness=run.harness,
        prompt_template=run.prompt_template,
        sampling_json=run.sampling_json,
        repeats=run.repeats,
        verifier_version=version,
        pass1=None if edited else head.pass_at_1,
        ci_low=low,
        ci_high=high,
        expected=cover.expected,
        scored=cover.scored,
        failed=cover.failed,
        missing=cover.missing,
        seals="edited" if edited else "intact" if seals.intact else seals.state,
        seals_edited="; ".join(seals.edited) if edited else None,
        store_bytes=stat.st_size,
        store_mtime=stat.st_mtime,
        store_ctime=stat.st_ctime,
    )


def catalog_file(root: Path) -> Path | None:
    """Where the catalog of `root` (resolved) is kept, or None when there is no private cache
    folder to keep it in."""
    try:
        folder = user_cache("catalogs")
    except RuntimeError:
        return None
    if not private_folder(folder, create=True):
        return None
    return folder / f"{hashlib.sha256(os.fsencode(root)).hexdigest()[:32]}.duckdb"


def _open_catalog(root: Path) -> tuple[duckdb.DuckDBPyConnection, Path | None]:
    path = catalog_file(root)
    if path is not None:
        try:
            return without_progress_bar(duckdb.connect(str(path))), path
        except duckdb.Error:  # held by another listing, or not a DuckDB file: go without
            pass
    return without_progress_bar(duckdb.connect(":memory:")), None


@dataclass(frozen=True, slots=True)
class Catalog:
    #: the DuckDB file holding table `runs`, None when it was computed in memory only
    path: Path | None
    entries: list[CatalogEntry]
    #: run directories whose store could not be read (a run in progress holds its lock), with why
    skipped: list[tuple[str, str]]

    def of_benchmark(
        self, benchmark: str, *, model: str | None = None, arm: str | None = None
    ) -> list[CatalogEntry]:
        """The runs of one benchmark (or environment), oldest first; only those of `model`,
        and only those whose run folder is named `arm` (a study names each arm's folder after
        it), when given."""
        chosen = [
            e
            for e in self.entries
            if benchmark in (e.benchmark, e.environment)
            and (model is None or e.model == model)
            and (arm is None or Path(e.run_dir).name == arm)
        ]
        return sorted(chosen, key=lambda e: (e.created_at or datetime.min, e.run_dir))


#: `runs` as DuckDB describes this version's table: (column, type) in order
_SCHEMA = [(f.name, _TYPES[f.type]) for f in fields(CatalogEntry)]


def _cached(con) -> dict[str, CatalogEntry]:
    """The rows kept from the last listing, by run directory. The catalog is a cache: a `runs`
    that is not this version's table (another gymflow version's columns, a view, an edit) is
    dropped and built again from the stores; read as it was, it was a BinderException on every
    listing until the file was deleted by hand."""
    kind = con.execute(
        "SELECT table_type FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_name = 'runs'"
    ).fetchone()
    if kind is not None:
        columns = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name = 'runs' ORDER BY ordinal_position"
        ).fetchall()
        if kind[0] != "BASE TABLE" or columns != _SCHEMA:
            con.execute(f"DROP {'VIEW' if kind[0] == 'VIEW' else 'TABLE'} runs")
    con.execute(_DDL)
    cursor = con.execute(f"SELECT {', '.join(COLUMNS)} FROM runs")
    return {row[0]: CatalogEntry(*row) for row in cursor.fetchall()}


#: What decides a run's score beside its benchmark, by the name a user reads: runs of one
#: benchmark that differ in one of these are different policies, not one policy over time.
POLICY_FACTORS = {
    "model": "models",
    "harness": "harnesses",
    "prompt_template": "prompt templates",
    "sampling_json": "sampling settings",
    "repeats": "repeat counts",
}


def _policy_value(entry: CatalogEntry, attribute: str) -> str:
    value = getattr(entry, attribute)
    if attribute == "sampling_json" and value:
        # another seed draws other samples from the same policy: not another policy
        sampling = {k: v for k, v in json.loads(value).items() if k != "seed"}
        return json.dumps(sampling, sort_keys=True)
    return str(value)


def mixed_factors(entries: list[CatalogEntry]) -> dict[str, list[str]]:
    """The policy factors the runs do not share (`POLICY_FACTORS`), each with its values in
    the order first seen: what a trend over them mixes."""
    mixed = {}
    for attribute, name in POLICY_FACTORS.items():
        values = list(dict.fromkeys(_policy_value(e, attribute) for e in entries))
        if len(values) > 1:
            mixed[name] = values
    return mixed


def refresh(root: Path) -> Catalog:
    """Bring the catalog of `root` up to date with the stores under `root` and return it.

    A row is recomputed only when its store's size, modification or change time changed; rows
    of stores that are gone are dropped."""
    root = root.resolve()
    if not root.is_dir():
        raise StoreError(f"{root}: no such folder")
    con, path = _open_catalog(root)
    with con:
        known = _cached(con)
        entries, skipped = [], []
        for run_dir in find_stores(root):
            key = str(run_dir)
            stat = (run_dir / STORE_FILE).stat()
            cached = known.get(key)
            now = (stat.st_size, stat.st_mtime, stat.st_ctime)
            if cached and (cached.store_bytes, cached.store_mtime, cached.store_ctime) == now:
                entries.append(cached)
                continue
            try:
                entries.append(read_entry(run_dir))
            except GymflowError as exc:  # another file, one being written, one to migrate
                skipped.append((key, str(exc)))
                if cached:
                    entries.append(cached)
        placeholders = ", ".join("?" for _ in COLUMNS)
        with transaction(con):
            con.execute("DELETE FROM runs")
            if entries:
                con.executemany(f"INSERT INTO runs VALUES ({placeholders})", map(astuple, entries))
    return Catalog(path, entries, skipped)
