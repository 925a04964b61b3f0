"""A writer does not record the file it leaves as checked (attack pass 16, on 85efcb0). A
writer that had checked its store (or made it) CHECKPOINTed and recorded the file's state and
SHA-256 as checked (`as_written`, `record_written`): the bytes on disk, not the bytes it checked
or wrote. DuckDB's lock is advisory and a checkpoint rewrites only what changed, so bytes another
process wrote into the file between the writer's check and its CHECKPOINT (a row group the writer
did not touch) were recorded as checked, and the next `gym eval health` / `gym eval profile` took
the record: the run's failing verdicts read as passed (pass@1 0.75 -> 1.00), healthy, seals
"intact". Now only a check records, so the next read checks in full and finds them.

The attacker: whoever can write the store file (no key). The edit is made in place (same inode),
two column segments of `verifications` (passed, reward) rewritten and their block's checksum
made right, while the writer runs: a re-run `gym eval aggregate` of shards already merged (the
edit lands while it copies the shards), and a resumed collection with nothing left to collect
(`collect_plan`, the edit lands after its batch). Both tests fail on d53ac00."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import EvalConfig
from gymflow.flows import eval_shard
from gymflow.rollouts.plan import resolve
from gymflow.simulated.endpoint import local_policy_server
from gymflow.steps.rollouts import collect_batch
from gymflow.store import merge
from gymflow.store.db import _HEADERS_BYTES
from tests.conftest import gym_in_process as gym
from tests.faults.forged_statistics import _checksum
from tests.faults.stores import collect_run

_SEGMENTS = (
    "SELECT block_id, block_offset, count, compression FROM pragma_storage_info('verifications') "
    "WHERE column_name = ? AND segment_type = ?"
)


def every_verdict_passed(store: Path, scratch: Path) -> None:
    """Rewrite, in place, the stored bytes of `verifications.passed` (uncompressed booleans) and
    `verifications.reward` (ALP: exponent, factor, FOR 0, one bit a value) to all true / 1.0,
    each touched block's checksum made right. The segments are found from a copy of the file
    (the file itself may be held by a writer: plain writes still land)."""
    peek = scratch / "peek.duckdb"
    shutil.copyfile(store, peek)
    raw = duckdb.connect(str(peek), read_only=True)
    try:
        (block_size,) = raw.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        passed = raw.execute(_SEGMENTS, ["passed", "BOOLEAN"]).fetchall()
        reward = raw.execute(_SEGMENTS, ["reward", "DOUBLE"]).fetchall()
    finally:
        raw.close()
        peek.unlink()
    assert [c for *_, c in passed] == ["Uncompressed"] and [c for *_, c in reward] == ["ALP"]

    def at(block: int, offset: int) -> int:
        return _HEADERS_BYTES + block * block_size + 8 + offset

    with open(store, "r+b") as file:
        ((block, offset, count, _),) = passed
        file.seek(at(block, offset))
        file.write(b"\x01" * count)
        ((block, offset, count, _),) = reward
        file.seek(at(block, offset))
        head = file.read(17)
        assert head[8:16] == bytes(8) and head[16] == 1 and count <= 32, head.hex()
        file.write(((1 << count) - 1).to_bytes(4, "little"))
        for start in {_HEADERS_BYTES + b * block_size for b, *_ in passed + reward}:
            file.seek(start + 8)
            body = file.read(block_size - 8)
            file.seek(start)
            file.write(struct.pack("<Q", _checksum(body)))


def _read(run: Path, cwd: Path) -> dict:
    health = gym("eval", "health", str(run), "--json", cwd=cwd)
    profile = gym("eval", "profile", str(run), "--json", cwd=cwd)
    full = gym("eval", "health", str(run), "--json", "--verify-seals", cwd=cwd)
    report = json.loads(health.stdout) if health.stdout.strip() else {}
    numbers = json.loads(profile.stdout) if profile.stdout.strip() else {}
    return {
        "health": (health.returncode, report.get("verdict")),
        "checked_at": report.get("seals_checked_at"),
        "profile": (profile.returncode, numbers.get("pass@1")),
        "intact": (numbers.get("seals") or {}).get("intact"),
        "verify_seals_code": full.returncode,
    }


def _assert_not_vouched(found: dict, honest_pass: float) -> None:
    # the file holds forged verdicts: the full check says so (passes today)
    assert found["verify_seals_code"] != 0, found
    # ...and so must a plain read; today it takes the writer's record: healthy, exit 0,
    # pass@1 1.0, seals intact
    assert found["health"] != (0, "healthy"), found
    assert found["profile"] == (0, honest_pass) or found["profile"][0] != 0, found


def test_a_store_edited_while_a_merge_writes_it_is_not_recorded_as_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = [collect_run(tmp_path / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]
    merged = tmp_path / "merged"
    gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path, check=True)
    honest = json.loads(gym("eval", "profile", str(merged), "--json", cwd=tmp_path).stdout)
    assert honest["pass@1"] == 0.75
    store = merged / "gymflow.duckdb"

    copy_shards = merge._copy

    def copied_while_edited(con, *args, **kwargs):
        # another process writes the destination while the merge copies the shards: after the
        # destination's check_before_writing, before as_written's CHECKPOINT
        every_verdict_passed(store, tmp_path)
        return copy_shards(con, *args, **kwargs)

    monkeypatch.setattr(merge, "_copy", copied_while_edited)
    # the same shards merged again (nothing new to copy: the verdicts' row group is untouched)
    gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path, check=True)
    monkeypatch.setattr(merge, "_copy", copy_shards)

    _assert_not_vouched(_read(merged, tmp_path), 0.75)


class _Finished:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value

    def wait(self) -> None:
        return None


class _InThisThread:
    """`collect_batch` run inline, without Prefect's task runner (the flow code is unchanged)."""

    @staticmethod
    def submit(batch, collector):
        return _Finished(collect_batch.fn(batch.unquote(), collector.unquote()))


def test_a_store_edited_while_a_resumed_collection_holds_it_is_not_recorded_as_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    run = collect_run(out)
    assert _read(run, tmp_path)["profile"] == (0, 0.75)
    plan = resolve(
        EvalConfig.model_validate(
            {"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2, "out": str(out)}
        )
    )
    monkeypatch.setattr(eval_shard, "collect_batch", _InThisThread)
    store = run / "gymflow.duckdb"
    with local_policy_server(plan) as server:
        # `gym eval run --resume` (or a retried shard) of a run with nothing missing; another
        # process writes the store while the collection holds it
        eval_shard.collect_plan(
            plan,
            resume=True,
            base_url=server.base_url,
            on_batch=lambda *_: every_verdict_passed(store, tmp_path),
        )
    _assert_not_vouched(_read(run, tmp_path), 0.75)
