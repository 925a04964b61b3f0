"""A shard published to storage every host reaches (a shard root that is a URL).

A shard runs on a local store in a folder of its own (the worker's temporary folder) and
publishes what it stores under its URL, `ROOT/RUN_ID/shard-I-of-N/`:

- `checkpoints/ATTEMPT/SEQ/` every few seconds or rollouts: the rollouts stored since the last
  checkpoint, as Parquet, and a `manifest.json` written last (a checkpoint without one was cut
  short and is never read). A host that dies loses what it stored after its last checkpoint.
- `results/ATTEMPT/` when every rollout of the shard is stored: the whole shard, then
  `COMMITTED.json`, written only if no attempt wrote it before (a conditional write). A late
  duplicate attempt is refused there, so it is never merged twice.

A shard that runs again, on any host, restores the committed result (nothing left to run) or
every checkpoint, newest first (a rollout run again after a failed attempt keeps its newest
rows), and runs only what is missing. Every manifest is read through one model (`Manifest`):
it names only the shard's own files, of the known tables, and every file is read back against
the size and checksum it records, with as many rollouts as it says. Nothing is read before its
size is known: a manifest past MAX_MANIFEST_BYTES, or a file past its recorded size, is refused
first (a sparse 6 GB object was read whole: attack pass 7, s05). Domain code: no Prefect here;
the shard flow (`flows/eval_shard.py`) drives it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, model_validator

from gymflow import __version__
from gymflow.core.config import COLLECTION_PATTERN, ConfigError
from gymflow.core.same_text import same_text
from gymflow.rollouts.collect import RESUMABLE_KINDS
from gymflow.rollouts.outcomes import BatchOutcome
from gymflow.rollouts.plan import RunPlan
from gymflow.rollouts.travel import travelled
from gymflow.store import snapshot
from gymflow.store.db import STORE_FILE, StoreError, connect, store_path
from gymflow.store.merge import ShardProgress, stored_progress
from gymflow.store.queries.rollouts import stored_count, stored_ids
from gymflow.store.remote import (
    AlreadyExists,
    ObjectTooLong,
    Remote,
    RemoteError,
    is_url,
    sha256,
)
from gymflow.store.seal import foreign_key_message
from gymflow.store.seal_key import SealKey, load_key
from gymflow.store.snapshot import SNAPSHOT_TABLES
from gymflow.store.superseded import supersede_failed

COMMITTED = "COMMITTED.json"
#: The longest manifest read: one names a shard's few files; a sparse 6 GB COMMITTED.json was
#: read whole before it was parsed (attack pass 7, s05).
MAX_MANIFEST_BYTES = 1 << 20
REPORT_FILE = "report.html"
MANIFEST = "manifest.json"


def new_attempt() -> str:
    """An attempt's name: sorts by its start, and no two attempts share one."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{secrets.token_hex(3)}"


def expectations(plan: RunPlan) -> dict[str, str]:
    """What a shard must share with the run that started it, checked before any model call."""
    return {"benchmark_version": plan.benchmark_version, "duckdb_version": duckdb.__version__}


def check_expectations(plan: RunPlan, expected: dict[str, str] | None) -> None:
    """Refuse to run a shard whose benchmark or DuckDB differs from its parent run's: its
    rollouts would belong to another protocol, or its store be unreadable where it is merged."""
    found = expectations(plan)
    for key, want in (expected or {}).items():
        if found.get(key) != want:
            raise ConfigError(
                f"shard {plan.config.shard.index}/{plan.config.shard.count}: this worker has "
                f"{key} {found.get(key)!r}, the run that started it {want!r}; install the same "
                "gymflow, benchmark files and DuckDB on every worker"
            )


def file_name(attempt: str, seq: int | None, table: str) -> str:
    """Where a checkpoint (`seq`) or a committed result (no `seq`) keeps a table's file."""
    folder = f"results/{attempt}" if seq is None else f"checkpoints/{attempt}/{seq:06d}"
    return f"{folder}/{table}.parquet"


class ManifestFile(BaseModel):
    """One table's file as a manifest records it."""

    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: NonNegativeInt


class Manifest(BaseModel):
    """A checkpoint's or a committed result's manifest, the one reading of every manifest: it
    is written by any host that reaches the storage, so nothing in it is trusted before this
    model checks it (a file name must be the shard's own file of a known table)."""

    model_config = ConfigDict(frozen=True)

    attempt: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    seq: NonNegativeInt | None = None  # a checkpoint's; none for a committed result
    rollouts: NonNegativeInt
    failed: NonNegativeInt
    files: dict[str, ManifestFile]
    bundle: str | None = Field(None, pattern=r"/bundles/[0-9a-f]{64}\.tar$")
    #: the run's collection (`rollouts/collection.py`), sealed: a manifest copied into another
    #: collection's folder (an earlier night's, put back) is refused there; none: an earlier
    #: gymflow's
    collection: str | None = Field(None, pattern=COLLECTION_PATTERN)
    written_at: str = ""
    gymflow_version: str = ""
    duckdb_version: str = ""
    #: the seal key's id and the manifest's MAC under it (`sealed`): whoever can write the
    #: storage can rewrite a file and its checksum here, but not this
    seal_key_id: str | None = Field(None, pattern=r"^[0-9a-f]{16}$")
    seal: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")

    def _sealed_text(self) -> str:
        body = self.model_dump(mode="json", exclude={"seal"})
        return "gymflow manifest " + json.dumps(body, sort_keys=True, separators=(",", ":"))

    def sealed(self, key: SealKey) -> Manifest:
        """This manifest with its seal under `key`."""
        keyed = self.model_copy(update={"seal_key_id": key.key_id})
        return keyed.model_copy(update={"seal": key.mac(keyed._sealed_text())})

    @model_validator(mode="after")
    def _own_files(self) -> Manifest:
        if self.failed > self.rollouts:
            raise ValueError(f"failed: {self.failed} of {self.rollouts} rollouts")
        if sorted(self.files) != sorted(SNAPSHOT_TABLES):
            missing = sorted(set(SNAPSHOT_TABLES) - set(self.files))
            unknown = sorted(set(self.files) - set(SNAPSHOT_TABLES))
            raise ValueError(f"files: missing tables {missing}, unknown tables {unknown}")
        for table, entry in self.files.items():
            own = file_name(self.attempt, self.seq, table)
            if entry.name != own:
                raise ValueError(f"files.{table}.name: {entry.name!r} is not the shard's {own!r}")
        return self


def parse_manifest(url: str, data: bytes) -> Manifest:
    """The manifest at `url`, or a StoreError naming the URL and the first field that is wrong;
    one not sealed by this machine's seal key (`GYMFLOW_SEAL_KEY`) is refused too: an unsealed
    one, one sealed with another key, or one whose fields (a checksum) changed since."""
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "manifest"
        # a check across fields (`_own_files`) names its field in its own words
        what = (
            error["ctx"]["error"] if error["type"] == "value_error" else f"{field}: {error['msg']}"
        )
        raise StoreError(f"{url}: not a shard manifest ({what}); refused, nothing merged") from None
    key = load_key(create=False)
    if manifest.seal is None:
        raise StoreError(f"{url}: an unsealed shard manifest; refused, nothing merged")
    if key is None or manifest.seal_key_id != key.key_id:
        raise StoreError(
            foreign_key_message(url, manifest.seal_key_id, key) + "; refused, nothing merged"
        )
    if not same_text(manifest.sealed(key).seal or "", manifest.seal):
        raise StoreError(
            f"{url}: the manifest does not match its seal: it (a file's checksum, a count) was "
            "rewritten without the seal key; refused, nothing merged"
        )
    return manifest


@dataclass(frozen=True)
class Restored:
    """What a restore found: the committed result, checkpoints, or nothing."""

    source: str  # "committed", "checkpoints" or "nothing"
    rollouts: int
    pieces: int
    bundle: str | None = None  # the files the run carried (`rollouts/travel.py`)


class PublishedShard:
    """One shard's folder at a URL: its checkpoints and its committed result. With a
    `collection` (the run's that reads or writes it), every manifest is sealed with that one
    and must be, to be read."""

    def __init__(self, url: str, collection: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.remote = Remote(self.url)
        self.collection = collection

    def _parsed(self, name: str, data: bytes) -> Manifest:
        manifest = parse_manifest(f"{self.url}/{name}", data)
        if self.collection is not None and manifest.collection != self.collection:
            raise StoreError(
                f"{self.url}/{name}: written by collection {manifest.collection or '(none)'} "
                f"of this run, not by this collection {self.collection} (copied from another "
                "night of the same config?); refused, nothing merged"
            )
        return manifest

    def committed(self) -> Manifest | None:
        """The committed result's manifest, or None while no attempt committed."""
        data = self.remote.read(COMMITTED, MAX_MANIFEST_BYTES)
        return None if data is None else self._parsed(COMMITTED, data)

    def checkpoints(self) -> list[Manifest]:
        """The manifest of every whole checkpoint, newest first. A manifest listed but not yet
        readable (storage that lists an object while its upload completes) is left for the
        next reader, as a checkpoint without one is."""
        names = sorted(self.remote.find(f"/{MANIFEST}"), reverse=True)
        return [
            self._parsed(name, data)
            for name in names
            if (data := self.remote.read(name, MAX_MANIFEST_BYTES))
        ]

    def _download(self, manifest: Manifest, into: Path) -> dict[str, Path]:
        """A manifest's files into `into`, each streamed to disk and hashed as it goes, refused
        once it passes the size the manifest records (before a byte is read when the storage
        says so), then checked against its recorded size and checksum."""
        into.mkdir(parents=True, exist_ok=True)
        files = {}
        for table, entry in manifest.files.items():
            files[table] = into / f"{table}.parquet"
            try:
                got = self.remote.read_into(entry.name, files[table], entry.bytes)
            except ObjectTooLong as exc:
                raise StoreError(f"{exc}: its manifest records {entry.bytes:,} bytes (altered); "
                                 "nothing merged") from None  # fmt: skip
            if got is None:
                raise StoreError(f"{self.url}/{entry.name}: missing (named by a manifest)")
            if got != (entry.sha256, entry.bytes):
                raise StoreError(
                    f"{self.url}/{entry.name}: checksum mismatch (corrupt or altered); "
                    "refused, nothing merged"
                )
        return files

    def restore(self, run_dir: Path, *, checkpoints: bool = True) -> Restored:
        """Load the committed result, or else (with `checkpoints`) every checkpoint, into the
        store at `run_dir` (created if absent)."""
        committed = self.committed()
        if committed is not None:
            pieces = [committed]
        elif checkpoints:
            pieces = self.checkpoints()
        else:
            pieces = []
        with closing(connect(run_dir, create=True)) as con:
            with tempfile.TemporaryDirectory(prefix="gymflow-restore-") as scratch:
                for i, piece in enumerate(pieces):
                    files = self._download(piece, Path(scratch, str(i)))
                    held = snapshot.rollout_counts(con, files)
                    if held != (piece.rollouts, piece.failed):
                        raise StoreError(
                            f"{self.url}: attempt {piece.attempt}'s files hold {held[0]} "
                            f"rollouts ({held[1]} failed), its manifest says {piece.rollouts} "
                            f"({piece.failed}); refused, nothing merged"
                        )
                    snapshot.load(con, files)
            stored = stored_count(con)
        source = "committed" if committed else ("checkpoints" if pieces else "nothing")
        bundle = next((p.bundle for p in pieces if p.bundle), None)
        return Restored(source=source, rollouts=stored, pieces=len(pieces), bundle=bundle)

    def _upload(self, snap: snapshot.Snapshot, meta: dict[str, Any]) -> Manifest:
        """Upload a snapshot's files where `meta` (its attempt and checkpoint) puts them;
        returns its manifest (not yet written)."""
        files = {}
        for table, path in snap.files.items():
            data = path.read_bytes()
            name = file_name(meta["attempt"], meta.get("seq"), table)
            self.remote.put(name, data)
            files[table] = ManifestFile(name=name, sha256=sha256(data), bytes=len(data))
        key = load_key(create=True)
        assert key is not None
        return Manifest(
            **meta,
            collection=self.collection,
            rollouts=len(snap.rollout_ids),
            failed=snap.failed,
            files=files,
            written_at=datetime.now(UTC).isoformat(),
            gymflow_version=__version__,
            duckdb_version=duckdb.__version__,
        ).sealed(key)

    def checkpoint(self, run_dir: Path, attempt: str, seq: int, skip: set[str]) -> tuple[str, ...]:
        """Publish the rollouts stored at `run_dir` that are not in `skip`; returns their ids
        (none: nothing was written)."""
        with tempfile.TemporaryDirectory(prefix="gymflow-checkpoint-") as scratch:
            with closing(connect(run_dir)) as con:
                snap = snapshot.export(con, Path(scratch), skip=skip)
            if not snap.rollout_ids:
                return ()
            manifest = self._upload(snap, {"attempt": attempt, "seq": seq})
            folder = f"checkpoints/{attempt}/{seq:06d}"
            self.remote.put(f"{folder}/{MANIFEST}", manifest.model_dump_json(indent=1).encode())
        return snap.rollout_ids

    def commit(self, run_dir: Path, attempt: str, meta: dict[str, Any] | None = None) -> Manifest:
        """Publish the whole shard at `run_dir` as its result, then commit it: only if no other
        attempt committed first (AlreadyExists then, and this attempt's result is left unread).
        `meta` goes into the manifest (the run's bundle of files, `rollouts/travel.py`)."""
        with tempfile.TemporaryDirectory(prefix="gymflow-result-") as scratch:
            with closing(connect(run_dir)) as con:
                snap = snapshot.export(con, Path(scratch))
            manifest = self._upload(snap, {**(meta or {}), "attempt": attempt})
        self.remote.put_new(COMMITTED, manifest.model_dump_json(indent=1).encode())
        return manifest


def published_progress(
    url: str, run_id: str, keys: list, index: int, count: int, collection: str | None = None
) -> ShardProgress:
    """How much of a shard its committed result holds: a shard is done when committed (a
    result is committed only once every rollout is stored), not while it has checkpoints.
    Counted in the result's files, checked against their checksums, for the shard's own
    rollout keys: never the counts a manifest states. A result sealed by another collection
    than `collection` (when given) is an error, never progress."""
    with tempfile.TemporaryDirectory(prefix="gymflow-progress-") as scratch:
        try:
            PublishedShard(url, collection).restore(Path(scratch), checkpoints=False)
        except (RemoteError, StoreError) as exc:
            return ShardProgress(index, count, url, len(keys), 0, error=str(exc))
        return replace(stored_progress(scratch, run_id, keys, index, count), store=url)


class Checkpointer:
    """Checkpoints a local shard store on a thread while its shard runs: when `every_rollouts`
    new rollouts are stored, or `every_s` seconds after the last checkpoint if any are; once
    more on leaving. A failed upload is reported (`log`) and retried at the next tick."""

    def __init__(
        self,
        shard: PublishedShard,
        run_dir: Path,
        attempt: str,
        *,
        every_s: float,
        every_rollouts: int,
        log: Callable[[str], None] = print,
    ) -> None:
        self.shard, self.run_dir, self.attempt = shard, run_dir, attempt
        self.every_s, self.every_rollouts, self.log = every_s, every_rollouts, log
        with closing(connect(run_dir)) as con:  # what the store holds already is published
            self.done = stored_ids(con)
        self.seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gymflow-checkpoint", daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> Checkpointer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.checkpoint()

    def checkpoint(self) -> int:
        """Publish what is new now; returns how many rollouts the checkpoint holds."""
        with self._lock:
            try:
                ids = self.shard.checkpoint(self.run_dir, self.attempt, self.seq, self.done)
            except (StoreError, RemoteError, OSError, duckdb.Error) as exc:
                self.log(f"checkpoint to {self.shard.url} failed, retried later: {exc}")
                return 0
            if ids:
                self.seq += 1
                self.done.update(ids)
            return len(ids)

    def _stored(self) -> int:
        with closing(connect(self.run_dir)) as con:
            return stored_count(con)

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.25):
            try:
                new = self._stored() - len(self.done)
            except (StoreError, duckdb.Error):
                continue
            due = time.monotonic() - last >= self.every_s
            if new >= self.every_rollouts or (new > 0 and due):
                self.checkpoint()
                last = time.monotonic()


@contextmanager
def local_work_dir() -> Iterator[Path]:
    """A folder of this host for a published shard's local store (GYMFLOW_WORK_DIR, or the
    temporary folder), removed afterwards: what matters was published."""
    base = os.environ.get("GYMFLOW_WORK_DIR") or None
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="gymflow-shard-", dir=base))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_url(shard_root: str, run_id: str, collection: str | None) -> str:
    """Where a run's store and report are published beside its collection's shards (with no
    collection, an earlier gymflow's place, beside the run's)."""
    folder = f"{run_id}/{collection}" if collection else run_id
    return f"{shard_root.rstrip('/')}/{folder}/run"


def publish_run(run_dir: Path | str, url: str) -> list[str]:
    """Upload a run's store and report to `url`, so a run whose flow ran on a worker can be
    read where the user is (`gym eval aggregate URL`, or the storage's own copy command).
    Replaced on each publish: a resumed run publishes its newer store."""
    remote = Remote(url)
    published = []
    for name in (STORE_FILE, REPORT_FILE):
        path = Path(run_dir, name)
        if path.exists():
            remote.put_file(name, path)
            published.append(f"{url}/{name}")
    return published


def shard_folders(location: str) -> list[str]:
    """The committed shards at `location`: a shard's URL, or a folder holding shards (a run's
    folder under the shard root)."""
    names = Remote(location).find(COMMITTED)
    return [
        location.rstrip("/") + ("/" + name.removesuffix(f"/{COMMITTED}") if "/" in name else "")
        for name in names
        if name == COMMITTED or name.endswith(f"/{COMMITTED}")
    ]


@contextmanager
def fetched(
    locations: list[str], *, checkpoints: bool = False, skip_missing: bool = True
) -> Iterator[list[Path]]:
    """Local shard stores for `locations` to merge: a path as it is; a URL's committed result
    (or, with `checkpoints`, what its checkpoints hold) restored into a temporary store.
    Locations with nothing to merge are left out (`skip_missing`) or refused. While inside,
    the registry reads the files the run carried (its bundle), so the merge resolves the run's
    tasks without the user's benchmark files."""
    with ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="gymflow-fetched-"))
        stores: list[Path] = []
        bundles: set[str] = set()
        for i, location in enumerate(locations):
            if not is_url(location):
                if store_path(location).exists() or not skip_missing:
                    stores.append(Path(location))
                continue
            for j, url in enumerate(shard_folders(location) or [location]):
                local = Path(scratch, f"{i}-{j}")
                restored = PublishedShard(url).restore(local, checkpoints=checkpoints)
                if restored.source != "nothing":
                    stores.append(local)
                    bundles.update([restored.bundle] if restored.bundle else [])
                elif not skip_missing:
                    raise StoreError(f"{url}: no committed shard result here")
        for bundle in sorted(bundles):  # one per run; another run's shards are refused anyway
            stack.enter_context(travelled(bundle))
        yield stores


def run_published(
    plan: RunPlan,
    collect: Callable[[RunPlan], tuple[BatchOutcome, ...]],
    *,
    every_s: float,
    every_rollouts: int,
    meta: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[BatchOutcome, ...]:
    """Run the shard published at `plan.config.out` (a URL) on a local store: restore what was
    published, set aside what failed for a transient reason (an uncommitted shard runs again
    as a retry, often on another host: a worker that could not reach the model leaves only
    failures, and the shard could never complete), `collect` it while it is checkpointed, then
    commit it, with `meta` in its manifest, if every rollout is stored. Returns what `collect`
    did (nothing, for a shard committed already)."""
    config = plan.config
    shard = PublishedShard(config.out, config.shard.collection)
    label = f"shard {config.shard.index}/{config.shard.count}"
    committed = shard.committed()
    if committed is not None:
        log(f"{label}: committed by attempt {committed.attempt} already; nothing to run")
        return ()
    with local_work_dir() as work:
        restored = shard.restore(work)
        log(
            f"{label}: restored {restored.rollouts} rollouts from {restored.pieces} "
            f"checkpoints at {shard.url}"
            if restored.pieces
            else f"{label}: nothing published yet at {shard.url}"
        )
        local = plan.for_shard(config.model_copy(update={"out": str(work)}))
        with closing(connect(work)) as con:
            supersede_failed(con, plan.run_id, RESUMABLE_KINDS)
        attempt = new_attempt()
        with Checkpointer(
            shard, work, attempt, every_s=every_s, every_rollouts=every_rollouts, log=log
        ) as checkpointer:
            collected = collect(local)
        index, count = config.shard.index, config.shard.count
        progress = stored_progress(work, plan.run_id, plan.keys(), index, count)
        if not progress.complete:
            log(
                f"{label}: {progress.stored} of {progress.expected} rollouts stored "
                f"({progress.failed} failed); checkpointed, not committed"
            )
            return collected
        try:
            shard.commit(work, attempt, meta)
        except AlreadyExists:
            winner = shard.committed()
            log(
                f"{label}: a late duplicate: attempt {winner and winner.attempt} committed this "
                "shard first, so this attempt's result is refused and never merged"
            )
            return collected
        log(
            f"{label}: committed {progress.stored} rollouts at {shard.url} (attempt {attempt}, "
            f"{checkpointer.seq} checkpoints)"
        )
        return collected
