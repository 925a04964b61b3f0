"""Shards published to object storage (rollouts/published.py, store/remote.py) against a real S3
server (SeaweedFS, tests/storage.py) and a local folder: a commit is a conditional write that a
second attempt loses, checkpoints restore what a dead attempt stored, checksums are checked, and
`gym eval aggregate` merges committed results from the URL, idempotently."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import ConfigError, EvalConfig
from gymflow.environments.registry import PATH_VARIABLE
from gymflow.flows.fan_out import loopback_urls
from gymflow.rollouts.merge import shard_progress
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.published import (
    COMMITTED,
    Manifest,
    PublishedShard,
    check_expectations,
    expectations,
    published_progress,
    run_published,
)
from gymflow.rollouts.travel import publish_bundle, travelled
from gymflow.store.db import StoreError
from gymflow.store.remote import AlreadyExists, Remote, RemoteError
from gymflow.store.seal_key import SealKey
from tests.conftest import gym, gym_in_process
from tests.environments.test_dataset import ROWS, write_benchmark, write_rows
from tests.faults.stores import collect_run, copied_run, query


#: SeaweedFS is the slow tier's, as the `s3` fixture is (tests/conftest.py, SLOW_FIXTURES): asked
#: for by name here, the fixture alone would not mark these
@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.slow), "file"])
def root(request, tmp_path) -> str:
    """A shard root on S3 (SeaweedFS) or on this disk (file://), one per test."""
    if request.param == "file":
        return f"file://{tmp_path / 'root'}"
    return request.getfixturevalue("s3").url(tmp_path.name)


def test_a_conditional_write_has_one_winner(root):
    remote = Remote(root)
    remote.put_new("COMMITTED.json", b"first")
    with pytest.raises(AlreadyExists, match="already written by another attempt"):
        remote.put_new("COMMITTED.json", b"second")
    assert remote.read("COMMITTED.json", 1024) == b"first"
    assert remote.read("absent.json", 1024) is None


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, int], Path]:
    """Shard `index` of `count`, collected once in the module (for `_shard` to copy)."""
    made: dict[tuple[int, int], Path] = {}

    def shard_run(index: int, count: int) -> Path:
        if (index, count) not in made:
            folder = tmp_path_factory.mktemp("collected") / f"shard-{index}"
            made[(index, count)] = collect_run(folder, shard={"index": index, "count": count})
        return made[(index, count)]

    return shard_run


def _shard(
    collected: Callable[[int, int], Path], tmp_path: Path, index: int = 0, count: int = 2
) -> tuple[Path, EvalConfig]:
    """A copy (`copied_run`) at `tmp_path` of the module's shard `index` of `count`."""
    config = {"shard": {"index": index, "count": count}}
    run_dir = copied_run(collected(index, count), tmp_path / f"shard-{index}")
    return run_dir, EvalConfig.model_validate(
        {"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2, **config}
    )


def _rollouts(run_dir: Path) -> int:
    return query(run_dir / "gymflow.duckdb", "SELECT count(*) FROM rollouts")[0][0]


def test_checkpoints_restore_and_a_late_duplicate_commit_is_refused(collected, root, tmp_path):
    run_dir, config = _shard(collected, tmp_path)
    stored = _rollouts(run_dir)
    shard = PublishedShard(f"{root}/run/shard-0-of-2")
    # a checkpoint holds what is new since the last one; a second with nothing new writes none
    first = shard.checkpoint(run_dir, "a1", 0, set())
    assert len(first) == stored
    assert shard.checkpoint(run_dir, "a1", 1, set(first)) == ()
    assert len(shard.checkpoints()) == 1

    # another host restores the checkpoints into a fresh store: every rollout, once
    restored = shard.restore(tmp_path / "elsewhere")
    assert (restored.source, restored.rollouts) == ("checkpoints", stored)
    again = shard.restore(tmp_path / "elsewhere")  # idempotent
    assert again.rollouts == stored
    calls = query(tmp_path / "elsewhere" / "gymflow.duckdb", "SELECT count(*) FROM model_calls")
    assert calls == query(run_dir / "gymflow.duckdb", "SELECT count(*) FROM model_calls")

    plan = resolve(config)
    keys = plan.keys()
    assert not published_progress(shard.url, plan.run_id, keys, 0, 2).complete
    shard.commit(run_dir, "a1")
    progress = published_progress(shard.url, plan.run_id, keys, 0, 2)
    assert progress.complete and progress.stored == len(keys)
    with pytest.raises(AlreadyExists):
        shard.commit(tmp_path / "elsewhere", "a2")  # the late duplicate
    assert shard.committed().attempt == "a1"
    assert shard.restore(tmp_path / "third").source == "committed"


def test_a_file_altered_after_its_commit_is_refused(collected, root, tmp_path):
    run_dir, _ = _shard(collected, tmp_path)
    shard = PublishedShard(f"{root}/run/shard-0-of-2")
    manifest = shard.commit(run_dir, "a1")
    name = manifest.files["rollouts"].name
    data = shard.remote.read(name, 1 << 30)
    shard.remote.put(name, data[:-1] + bytes([data[-1] ^ 1]))  # as long, one bit flipped
    with pytest.raises(Exception, match="checksum mismatch"):
        shard.restore(tmp_path / "elsewhere")


def test_aggregate_reads_committed_shards_from_the_url(collected, s3, tmp_path):
    url = s3.url(tmp_path.name, "run")
    for index in (0, 1):
        run_dir, _ = _shard(collected, tmp_path, index)
        PublishedShard(f"{url}/shard-{index}-of-2").commit(run_dir, f"a{index}")
    out = tmp_path / "merged"
    env = {**s3.env, "PREFECT_API_URL": ""}
    first = gym("eval", "aggregate", url, "--out", str(out), "--json", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["expected"] == report["stored"] == 12 and report["missing_count"] == 0
    second = gym("eval", "aggregate", url, "--out", str(out), "--json", cwd=tmp_path, env=env)
    assert json.loads(second.stdout)["added"]["rollouts"] == 0
    con = duckdb.connect(str(out / "gymflow.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(DISTINCT rollout_id) FROM rollouts").fetchone()[0] == 12
    finally:
        con.close()
    missing = gym(
        "eval", "aggregate", s3.url("nothing-here"), "--out", str(out), cwd=tmp_path, env=env
    )
    assert missing.returncode == 1 and "no committed shard result here" in missing.stderr


def test_a_shard_whose_every_rollout_failed_is_not_complete(collected, tmp_path):
    # the local policy answering nothing: every rollout a transport failure, all stored
    run_dir, config = _shard(collected, tmp_path, 0, 1)
    con = duckdb.connect(str(run_dir / "gymflow.duckdb"))
    try:
        con.execute("UPDATE rollouts SET status = 'failed', failure_kind = 'transport'")
    finally:
        con.close()
    plan = resolve(config.model_copy(update={"out": str(run_dir)}))
    progress = shard_progress(plan)
    assert progress.stored == progress.expected == progress.failed == 12
    assert not progress.complete


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://10.0.0.5:8000/v1", False),
        ("https://models.example.com/v1", False),
    ],
)
def test_a_work_pool_run_is_warned_of_a_loopback_model_url(url, loopback):
    config = EvalConfig.model_validate(
        {"benchmark": "arithmetic-smoke", "model": {"kind": "responses", "base_url": url}}
    )
    warnings = loopback_urls(config)
    assert bool(warnings) is loopback
    assert all("model.base_url" in w and "loopback" in w for w in warnings)


def test_the_users_own_benchmark_travels_with_the_run(s3, tmp_path, monkeypatch):
    """A benchmark and dataset only the user's machine has: packed at the shard root, a worker
    without them resolves the same run from the bundle, and the aggregate needs neither."""
    mine = tmp_path / "mine"
    write_rows(mine / "benchmarks" / "d.jsonl", ROWS)
    write_benchmark(mine, "sums", {"path": "d.jsonl"})
    monkeypatch.setenv(PATH_VARIABLE, str(mine))
    shard = {"shard": {"index": 0, "count": 1}, "benchmark": "sums", "repeats": 2}
    plan = resolve(EvalConfig.model_validate(shard))
    bundle = publish_bundle(plan, s3.url(tmp_path.name))
    assert bundle is not None and publish_bundle(plan, s3.url(tmp_path.name)) == bundle
    run_dir = collect_run(tmp_path / "shard", **shard)
    url = s3.url(tmp_path.name, plan.run_id)
    PublishedShard(f"{url}/shard-0-of-1").commit(run_dir, "a1", {"bundle": bundle})

    monkeypatch.delenv(PATH_VARIABLE)  # a worker: none of the user's files
    with pytest.raises(ConfigError, match="sums"):
        resolve(EvalConfig.model_validate(shard))
    with travelled(bundle):
        there = resolve(EvalConfig.model_validate(shard))
    assert there.benchmark_version == plan.benchmark_version
    assert [t.task_id for t in there.all_tasks] == [t.task_id for t in plan.all_tasks]

    env = {**s3.env, "PREFECT_API_URL": "", PATH_VARIABLE: ""}
    merged = gym(
        "eval", "aggregate", url, "--out", str(tmp_path / "merged"), "--json", cwd=tmp_path, env=env
    )
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout)["stored"] == len(ROWS) * 2


def test_a_shard_unlike_its_parent_is_refused_before_any_model_call():
    plan = resolve(EvalConfig(benchmark="arithmetic-smoke", limit=4))
    check_expectations(plan, expectations(plan))
    for key, other in (("benchmark_version", "0123456789ab"), ("duckdb_version", "1.5.5")):
        with pytest.raises(ConfigError, match=f"this worker has {key}"):
            check_expectations(plan, {**expectations(plan), key: other})


def _committed_json(shard: PublishedShard) -> dict:
    return json.loads(shard.remote.read(COMMITTED, 1 << 20))


def _forge(manifest: dict, change: str) -> bytes:
    """A committed manifest rewritten by whoever can write the bucket: each a class of forgery."""
    files = manifest["files"]
    if change == "not json":
        return b"{not json"
    if change == "empty":
        return b"{}"
    if change == "no files":  # reads as a complete shard holding no data
        return json.dumps({**manifest, "files": {}}).encode()
    if change == "a table missing":
        files = {table: entry for table, entry in files.items() if table != "rollouts"}
        return json.dumps({**manifest, "files": files}).encode()
    if change == "a name climbing out":
        rollouts = {**files["rollouts"], "name": "../../other-run-secret.txt"}
        return json.dumps({**manifest, "files": {**files, "rollouts": rollouts}}).encode()
    if change == "a table climbing out":
        files = {("../../../../tmp/x/pwned" if t == "rollouts" else t): e for t, e in files.items()}
        return json.dumps({**manifest, "files": files}).encode()
    if change == "another shard's file":
        rollouts = {**files["rollouts"], "name": "results/a9/rollouts.parquet"}
        return json.dumps({**manifest, "files": {**files, "rollouts": rollouts}}).encode()
    if change == "more rollouts than stored":
        return json.dumps({**manifest, "rollouts": 999}).encode()
    if change == "fewer rollouts than stored":
        return json.dumps({**manifest, "rollouts": 0}).encode()
    if change == "the seal removed":
        return json.dumps({**manifest, "seal": None, "seal_key_id": None}).encode()
    if change == "sealed with another key":
        return (
            Manifest.model_validate(manifest)
            .sealed(SealKey(b"k" * 32, "test"))
            .model_dump_json()
            .encode()
        )
    raise AssertionError(change)


#: Each forgery, and what its one-line refusal says after the shard's URL.
FORGERIES = {
    "not json": f"/{COMMITTED}: not a shard manifest (manifest: Invalid JSON",
    "empty": f"/{COMMITTED}: not a shard manifest (attempt: Field required",
    "no files": f"/{COMMITTED}: not a shard manifest (files: missing tables ['model_calls'",
    "a table missing": f"/{COMMITTED}: not a shard manifest (files: missing tables ['rollouts']",
    "a name climbing out": f"/{COMMITTED}: not a shard manifest (files.rollouts.name: "
    "'../../other-run-secret.txt' is not the shard's 'results/a1/rollouts.parquet')",
    "a table climbing out": f"/{COMMITTED}: not a shard manifest (files: missing tables "
    "['rollouts'], unknown tables ['../../../../tmp/x/pwned'])",
    "another shard's file": f"/{COMMITTED}: not a shard manifest (files.rollouts.name: "
    "'results/a9/rollouts.parquet' is not the shard's",
    # a count or checksum rewritten is no longer the manifest its seal was made over
    "more rollouts than stored": f"/{COMMITTED}: the manifest does not match its seal",
    "fewer rollouts than stored": f"/{COMMITTED}: the manifest does not match its seal",
    "the seal removed": f"/{COMMITTED}: an unsealed shard manifest; refused",
    "sealed with another key": f"/{COMMITTED}: sealed with a key this machine does not hold",
}


@pytest.mark.parametrize("change", FORGERIES)
def test_a_forged_committed_manifest_is_refused_in_one_line(collected, root, tmp_path, change):
    """Whatever a forged COMMITTED.json says, no reader leaves the shard's folder, believes its
    counts or crashes: restore, progress and a rerun of the shard each refuse it with one
    StoreError naming the URL and the field."""
    run_dir, config = _shard(collected, tmp_path)
    shard = PublishedShard(f"{root}/run/shard-0-of-2")
    shard.commit(run_dir, "a1")
    manifest = _committed_json(shard)
    shard.remote.put(COMMITTED, _forge(manifest, change))
    expected = shard.url + FORGERIES[change].format(held=manifest["rollouts"])

    with pytest.raises(StoreError) as refused:
        shard.restore(tmp_path / "elsewhere")
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)

    plan = resolve(config)
    progress = published_progress(shard.url, plan.run_id, plan.keys(), 0, 2)
    assert not progress.complete and progress.stored == 0 and expected in progress.error

    def collect(_plan):
        raise AssertionError("a refused shard runs nothing")

    # a rerun reads only the manifest: every forgery is refused as it is read, sealed or not
    mine = resolve(config.model_copy(update={"out": shard.url}))
    with pytest.raises(StoreError, match=re.escape(expected)):
        run_published(mine, collect, every_s=60, every_rollouts=100, log=lambda _: None)


def test_a_forged_manifest_is_one_error_line_from_aggregate(collected, tmp_path):
    run_dir, _ = _shard(collected, tmp_path)
    url = f"file://{tmp_path / 'root'}/run"
    shard = PublishedShard(f"{url}/shard-0-of-2")
    shard.commit(run_dir, "a1")
    shard.remote.put(COMMITTED, _forge(_committed_json(shard), "a name climbing out"))
    out = tmp_path / "merged"
    result = gym_in_process(
        "eval", "aggregate", url, "--out", str(out), cwd=tmp_path, env={"PREFECT_API_URL": ""}
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{shard.url}/{COMMITTED}: not a shard manifest (files.rollouts.name: " in result.stderr


@pytest.mark.parametrize("name", ["../secret", "a/../../secret", "/etc/passwd", "a//b", "a\\b"])
def test_storage_names_outside_the_folder_are_refused(root, name):
    remote = Remote(f"{root}/run")
    for use in (lambda: remote.read(name, 1024), lambda: remote.put(name, b"x")):
        with pytest.raises(RemoteError, match="is not plainly inside it"):
            use()
