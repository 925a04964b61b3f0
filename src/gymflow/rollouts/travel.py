"""What a run resolved from the user's own files travels with it: a worker without them runs the
same tasks, and an aggregate elsewhere lists the same ones.

A run's benchmark file, its dataset file or task folders, and its environment folder, when they
come from the user's folders (`GYMFLOW_BENCHMARKS_PATH`, `GYMFLOW_ENVIRONMENTS_PATH`) rather than
gymflow's package, are packed into one tar file and stored content-addressed at the shard root
(`ROOT/bundles/SHA256.tar`). A shard (or an aggregate) given that name unpacks it, checks its
checksum, and puts it first on the registry's paths while it runs: the registry then resolves
the run exactly as the user's machine did, and the benchmark version check
(`rollouts/published.py`) refuses anything that still differs.

The tar keeps code and data apart: `environments/` holds the environment folder (the user's
code, from the environments path) and goes on the worker's environments path; `data/` holds the
benchmark and what it names in the registry's layout (`data/benchmarks/NAME.yaml`) and goes on
the benchmark path only. A benchmark may come from a run folder (`gym data select`), and a
folder under it was an environment on the worker, its module imported. A link in what is packed
is refused: the bundle carries files as they are, never what a link in a run folder points to
(the seal key)."""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from gymflow.core.config import ConfigError
from gymflow.core.trees import in_bytecode_cache
from gymflow.environments.registry import (
    BUILTIN_DIR,
    benchmark_files,
    environment_sources,
    on_search_path,
)
from gymflow.rollouts.plan import RunPlan
from gymflow.store.remote import AlreadyExists, Remote, RemoteError, sha256

#: The largest bundle a run carries (packed in memory where it starts; read where it is used
#: only up to this, streamed to disk).
MAX_BUNDLE_BYTES = 2 << 30


def _shipped(path: Path) -> bool:
    return BUILTIN_DIR in path.resolve().parents


#: The bundle's two halves: the environment folder (code) and the benchmark with its data.
ENVIRONMENTS, DATA = "environments", "data"


def _no_link(path: Path) -> Path:
    if path.is_symlink():
        raise ConfigError(
            f"{os.path.normpath(path)}: a symlink; a run's own files travel to its workers as "
            "they are, never what a link points to: replace it with the file or folder itself"
        )
    return path


def _tree(prefix: str, path: Path, *, data: bool = True) -> dict[str, Path]:
    """The files under `path` by their name under `prefix`; in `data` (which may lie in a run
    folder), a link is refused. An environment folder is the user's code, links and all."""
    checked = _no_link if data else (lambda part: part)
    if checked(path).is_file():
        return {prefix: path}
    return {
        posixpath.join(prefix, part.relative_to(path).as_posix()): part
        for part in sorted(path.rglob("*"))
        if not in_bytecode_cache(part.relative_to(path)) and checked(part).is_file()
    }


def bundle_files(plan: RunPlan) -> dict[str, Path]:
    """The user's files the plan was resolved from, by their name in the bundle (none for a
    run of gymflow's own benchmarks and environments)."""
    data: dict[str, Path] = {}
    benchmark = plan.benchmark
    if benchmark is not None:
        path = benchmark_files()[benchmark.name]
        if not _shipped(path):
            data[f"benchmarks/{path.name}"] = _no_link(path)
            dataset = benchmark.dataset
            if dataset is not None and dataset.path is not None:
                name = posixpath.normpath(posixpath.join("benchmarks", dataset.path))
                if name.startswith("..") or posixpath.isabs(name):
                    raise ConfigError(
                        f"{path}: dataset.path {dataset.path!r} lies outside the folder above "
                        "benchmarks/, so it cannot travel to the workers; move it inside"
                    )
                data.update(_tree(name, path.parent / dataset.path))
            if benchmark.workspace is not None:  # the task folders, beside it as the user has them
                name = posixpath.normpath(posixpath.join("benchmarks", benchmark.workspace))
                if name.startswith("..") or posixpath.isabs(name):
                    raise ConfigError(
                        f"{path}: workspace {benchmark.workspace!r} lies outside the folder above "
                        "benchmarks/, so it cannot travel to the workers; move it inside"
                    )
                data.update(_tree(name, path.parent / benchmark.workspace))
    files = {posixpath.join(DATA, name): file for name, file in data.items()}
    source = environment_sources().get(plan.env.name)
    if source is not None and not _shipped(source.folder):
        name = posixpath.join(ENVIRONMENTS, source.folder.name)
        files.update(_tree(name, source.folder, data=False))
    return files


def pack(files: dict[str, Path]) -> bytes:
    """A tar of `files`, byte for byte the same for the same contents (sorted, no times or
    owners): its checksum names it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            data = files[name].read_bytes()
            info = tarfile.TarInfo(name)
            # the executable bit is part of a workspace task's version (and of its behaviour)
            executable = files[name].stat().st_mode & 0o111
            info.size, info.mode = len(data), 0o755 if executable else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def publish_bundle(plan: RunPlan, shard_root: str) -> str | None:
    """Store the plan's bundle at the shard root; returns its URL (None: nothing to carry)."""
    files = bundle_files(plan)
    if not files:
        return None
    data = pack(files)
    if len(data) > MAX_BUNDLE_BYTES:
        raise ConfigError(
            f"the run's own files ({', '.join(sorted(files)[:3])}, …) pack to {len(data):,} "
            f"bytes, past the {MAX_BUNDLE_BYTES:,} a run carries to its shards"
        )
    name = f"bundles/{sha256(data)}.tar"
    # content-addressed: a name already held holds these very bytes (an earlier run's)
    with suppress(AlreadyExists):
        Remote(shard_root).put_new(name, data)
    return f"{shard_root.rstrip('/')}/{name}"


@contextmanager
def travelled(bundle: str | None) -> Iterator[None]:
    """While inside, the registry also reads the bundle at `bundle` (checked against the
    checksum its name carries), ahead of this machine's own folders."""
    if bundle is None:
        yield
        return
    folder, name = bundle.rsplit("/", 1)
    with tempfile.TemporaryDirectory(prefix="gymflow-bundle-") as scratch:
        # streamed to disk, hashed as it goes: never whole in memory (attack pass 7, s05)
        tar_file, unpacked = Path(scratch, "bundle.tar"), Path(scratch, "unpacked")
        got = Remote(folder).read_into(name, tar_file, MAX_BUNDLE_BYTES)
        if got is None:
            raise RemoteError(f"{bundle}: the run's files are missing from the shard root")
        if f"{got[0]}.tar" != name:
            raise RemoteError(f"{bundle}: checksum mismatch (corrupt or altered); refused")
        with tarfile.open(tar_file) as tar:
            tar.extractall(unpacked, filter="data")  # no links, no paths outside
        tar_file.unlink()
        with unpacked_on_path(unpacked):
            yield


@contextmanager
def unpacked_on_path(folder: Path) -> Iterator[None]:
    """While inside, the registry reads a bundle unpacked in `folder`: its environment folder
    on the environments path, its benchmark and data on the benchmark path only, checked as
    data where the run was planned (`bundle_files` packs what `resolve` loaded)."""
    with (
        on_search_path(folder / ENVIRONMENTS),
        on_search_path(folder / DATA, benchmarks_only=True, vetted=True),
    ):
        yield
