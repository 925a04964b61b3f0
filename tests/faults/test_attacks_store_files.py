"""The files DuckDB opens for a store are checked before it opens them, and the work a store
file makes is bounded by the data it holds. Attack pass 6:
- s12: a link at RUN/gymflow.duckdb.wal had the owner's next writer (`use-version`, `reverify`)
  write its log into whatever the link named: the seal key (every later command failed), the
  sealed-stores ledger, another run's store (4.2 MB -> 7.8 KB, "not a DuckDB database"). A FIFO
  there hung health, profile and `gym runs list` forever.
- s17: `truncate -s +16G` on a store (no disk used) took health from 3.8 s to 143 s, the digest
  of the seal check reading the zeros, and every copy of a store wrote them out."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from gymflow.store.db import copy_data
from tests.conftest import gym
from tests.faults.stores import collect_run, query, tree_digest


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("files") / "run", limit=5)


def _copy(honest: Path, tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    shutil.copytree(honest, run)
    return run


def test_a_fifo_at_the_log_is_one_line_for_every_reader(honest: Path, tmp_path: Path) -> None:
    run = _copy(honest, tmp_path)
    os.mkfifo(run / "gymflow.duckdb.wal")
    for command in (("eval", "health", str(run)), ("eval", "profile", str(run))):
        done = gym(*command, cwd=tmp_path, timeout=60)  # hung forever before
        assert done.returncode == 1, done.stdout + done.stderr
        assert "gymflow.duckdb.wal: not a write-ahead log gymflow's store wrote" in done.stderr
    listed = gym("runs", "list", str(tmp_path), cwd=tmp_path, timeout=60)
    assert "Traceback" not in listed.stderr, listed.stderr


@pytest.mark.parametrize("target", ["a file of the owner's", "another run's store"])
def test_a_link_at_the_log_is_never_written_through(
    honest: Path, tmp_path: Path, target: str
) -> None:
    run = _copy(honest, tmp_path)
    if target == "another run's store":
        victim = _copy(honest, tmp_path, "victim") / "gymflow.duckdb"
    else:
        victim = tmp_path / "seal.key"
        victim.write_text("0" * 64)
    [(version,)] = query(run / "gymflow.duckdb", "SELECT verifier_version FROM runs")
    (run / "gymflow.duckdb.wal").symlink_to(victim)
    before, digest = _digest(victim), tree_digest(run)
    for command in (
        ("eval", "use-version", str(run), version),
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
        ("eval", "health", str(run)),
    ):
        done = gym(*command, cwd=tmp_path, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "not a write-ahead log gymflow's store wrote" in done.stderr, done.stderr
    assert _digest(victim) == before and tree_digest(run) == digest
    assert (run / "gymflow.duckdb.wal").is_symlink()


def test_a_writer_opens_no_store_file_with_another_name(honest: Path, tmp_path: Path) -> None:
    """A hard link at RUN/gymflow.duckdb to another run's store: a writer would write that run."""
    run, victim = tmp_path / "run", _copy(honest, tmp_path, "victim") / "gymflow.duckdb"
    run.mkdir()
    os.link(victim, run / "gymflow.duckdb")
    before = _digest(victim)
    done = gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, timeout=120)
    assert done.returncode == 1 and "a link, or a file with other names" in done.stderr
    assert _digest(victim) == before


def test_a_tail_of_nothing_is_refused_before_any_digest(honest: Path, tmp_path: Path) -> None:
    run = _copy(honest, tmp_path)
    store = run / "gymflow.duckdb"
    size = store.stat().st_size
    os.truncate(store, size + (16 << 30))  # 16 GB more, no disk
    done = gym("eval", "health", str(run), cwd=tmp_path, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bytes after the database's end" in done.stderr
    # a tail of a few blocks, as a checkpoint cut short can leave, still opens
    os.truncate(store, size + (1 << 20))
    assert gym("eval", "health", str(run), cwd=tmp_path, timeout=60).returncode == 0


def test_a_copy_writes_the_data_not_the_holes(tmp_path: Path) -> None:
    source = tmp_path / "sparse"
    with source.open("wb") as out:
        out.write(b"head")
        out.seek(1 << 30)
        out.write(b"tail")
    copy_data(source, tmp_path / "copy")
    copied = (tmp_path / "copy").stat()
    assert copied.st_size == source.stat().st_size
    assert copied.st_blocks * 512 < 1 << 20  # a GB long, a few blocks of disk
    with (tmp_path / "copy").open("rb") as read:
        assert read.read(4) == b"head"
        read.seek(1 << 30)
        assert read.read() == b"tail"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Exception, match="not a regular file"):
        copy_data(tmp_path / "fifo", tmp_path / "from-fifo")
