"""A shard root's objects are written by whoever can write the storage, and were read whole
before any check (attack pass 7, s05): a sparse 6 GB COMMITTED.json, or a 6 GB parquet file a
sealed manifest names, took `gym eval aggregate` past 2.4 GB. Now a manifest past 1 MiB is
refused from its size, and a data file past the size its sealed manifest records is refused
before it is read (streamed to disk and hashed as it goes otherwise); each in one line naming
the object, nothing merged."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow.rollouts.published import COMMITTED, MAX_MANIFEST_BYTES, PublishedShard
from gymflow.store.db import StoreError
from gymflow.store.remote import ObjectTooLong, RemoteError
from tests.conftest import gym_in_process
from tests.faults.stores import collect_run, copied_run

#: What a forged object adds past its bound here: read whole, the read would cost this much.
SPARSE_TAIL = 256 << 20


@pytest.fixture(scope="module")
def shard_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("collected") / "shard-0"
    return collect_run(folder, shard={"index": 0, "count": 2})


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.slow), "file"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'root'}"
    return request.getfixturevalue("s3").url(tmp_path.name)


@pytest.fixture
def committed(shard_run: Path, root: str, tmp_path: Path) -> PublishedShard:
    shard = PublishedShard(f"{root}/run/shard-0-of-2")
    shard.commit(copied_run(shard_run, tmp_path / "shard-0"), "a1")
    return shard


def _lengthened(shard: PublishedShard, name: str, extra: int) -> None:
    """`name` with `extra` spaces after it: a manifest still parses (JSON allows them) and keeps
    its seal, which on main was accepted; a data file passes its recorded size."""
    data = shard.remote.read(name, 1 << 30)
    assert data is not None
    shard.remote.put(name, data + b" " * extra)


def test_a_long_committed_manifest_is_refused_from_its_size(
    committed: PublishedShard, tmp_path: Path
) -> None:
    _lengthened(committed, COMMITTED, 2 * MAX_MANIFEST_BYTES)
    with pytest.raises(ObjectTooLong) as refused:
        committed.restore(tmp_path / "elsewhere")
    assert str(refused.value).startswith(f"{committed.url}/{COMMITTED}: ")
    assert f"past the {MAX_MANIFEST_BYTES:,} read here; refused" in str(refused.value)


def test_a_data_file_past_its_sealed_size_is_refused(
    committed: PublishedShard, tmp_path: Path
) -> None:
    manifest = committed.committed()
    assert manifest is not None
    entry = manifest.files["rollouts"]
    _lengthened(committed, entry.name, 4096)
    with pytest.raises(StoreError) as refused:
        committed.restore(tmp_path / "elsewhere")
    message = str(refused.value)
    assert message.startswith(f"{committed.url}/{entry.name}: ")
    assert f"its manifest records {entry.bytes:,} bytes (altered); nothing merged" in message
    assert "\n" not in message


def _sparse(path: Path) -> None:
    os.truncate(path, path.stat().st_size + SPARSE_TAIL)  # no disk: a hole


def _refused_within(call: Callable[[], object], match: str) -> int:
    """The peak of Python's allocations while `call` is refused with a RemoteError or a
    StoreError matching `match`."""
    tracemalloc.start()
    try:
        with pytest.raises((RemoteError, StoreError), match=match):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_sparse_objects_on_a_file_root_cost_no_read(shard_run: Path, tmp_path: Path) -> None:
    """A sparse tail on a local root (no disk for the attacker) is refused before a byte of it
    is read: the memory the refusal takes is far below the object's length."""
    url = f"file://{tmp_path / 'root'}/run"
    shard = PublishedShard(f"{url}/shard-0-of-2")
    manifest = shard.commit(copied_run(shard_run, tmp_path / "shard-0"), "a1")
    folder = tmp_path / "root" / "run" / "shard-0-of-2"
    parquet = folder / manifest.files["rollouts"].name
    _sparse(parquet)
    refusal = r"rollouts\.parquet: [\d,]+ bytes, past the [\d,]+ read here; refused"
    peak = _refused_within(lambda: shard.restore(tmp_path / "one"), refusal)
    assert peak < SPARSE_TAIL // 16, peak

    _sparse(folder / COMMITTED)
    refusal = rf"{COMMITTED}: [\d,]+ bytes, past the {MAX_MANIFEST_BYTES:,} read here; refused"
    peak = _refused_within(lambda: shard.restore(tmp_path / "two"), refusal)
    assert peak < SPARSE_TAIL // 16, peak

    # the owner's aggregate: one line naming the object, no store written
    out = tmp_path / "merged"
    result = gym_in_process(
        "eval", "aggregate", url, "--out", str(out), cwd=tmp_path, env={"PREFECT_API_URL": ""}
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{shard.url}/{COMMITTED}: " in result.stderr
    assert f"past the {MAX_MANIFEST_BYTES:,} read here; refused" in result.stderr
    assert not (out / "gymflow.duckdb").exists()
