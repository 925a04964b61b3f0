"""A sharded run whose shard root is an S3 URL (SeaweedFS), through the eval-run flow: each shard
works on a local store, checkpoints and commits it at the URL, and the run store is their merge;
a resumed run skips the committed shards, and a shard run again after its commit runs nothing."""

from __future__ import annotations

import pytest

from gymflow.flows.eval_run import evaluation_loop
from gymflow.flows.eval_shard import eval_shard
from gymflow.flows.parameters import ScaleOptions, shard_config
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.published import PublishedShard, run_url
from gymflow.store.remote import Remote
from tests.conftest import free_port
from tests.flows import test_shards
from tests.flows.test_shards import rows, snapshot

pytestmark = pytest.mark.prefect


def config(out):
    """test_shards' config, its model slowed so that a shard lasts several checkpoints (the
    checkpointer polls the store every 0.25 s between the collector's writes: at 50 ms a call,
    a shard of 60 rollouts ended in one checkpoint on a machine half as fast)."""
    base = test_shards.config(out)
    faults = base.model.faults.model_copy(update={"latency_ms": 200.0})
    return base.model_copy(
        update={"concurrency": 4, "model": base.model.model_copy(update={"faults": faults})}
    )


def test_a_run_sharded_on_s3_equals_the_run_in_one_store(prefect_api, s3, tmp_path):
    scale = ScaleOptions(shards=2, shard_root=s3.url(tmp_path.name), checkpoint_rollouts=16)
    whole = evaluation_loop(config(tmp_path / "whole"))
    result = evaluation_loop(config(tmp_path / "sharded"), scale=scale)
    assert result.aggregate.complete
    assert rows(tmp_path / "sharded") == rows(whole.run_dir)
    before = snapshot(tmp_path / "sharded")

    run_id = result.aggregate.run_id
    # the run store and report are published beside the shards, as they are
    published = Remote(run_url(scale.shard_root, run_id, result.collection))
    stored = (tmp_path / "sharded" / "gymflow.duckdb").read_bytes()
    assert published.read("gymflow.duckdb", 1 << 30) == stored
    assert (
        published.read("report.html", 1 << 30)
        == (tmp_path / "sharded" / "report.html").read_bytes()
    )
    planned = scale.model_copy(update={"collection": result.collection})
    shards = [shard_config(config(tmp_path / "sharded"), planned, run_id, i) for i in range(2)]
    for shard in shards:
        published = PublishedShard(shard.out, result.collection)
        assert published.committed().collection == result.collection  # sealed in
        committed = published.committed()
        assert committed is not None and committed.failed == 0
        assert len(published.checkpoints()) >= 2  # 60 rollouts a shard, one per 16 at most

    # resumed: both shards are committed, so neither runs; the store is unchanged
    again = evaluation_loop(config(tmp_path / "sharded"), resume=True, scale=scale)
    assert again.collection == result.collection
    assert [s.ran for s in again.shards] == [False, False]
    assert snapshot(tmp_path / "sharded") == before
    # a shard run again after its commit (a duplicate attempt) runs and commits nothing
    assert eval_shard(shards[0]) == ()
    assert snapshot(tmp_path / "sharded") == before


def test_a_shard_whose_host_reached_no_model_runs_its_failures_again_elsewhere(
    prefect_api, s3, tmp_path
):
    """The first host cannot reach the model: every rollout it tries fails, so the shard is
    not complete and commits nothing. A retry on a host that can restores those failures,
    runs them again, and commits the shard whole."""
    base = test_shards.config(tmp_path / "run")
    cfg = base.model_copy(
        update={"limit": 8, "model": base.model.model_copy(update={"max_retries": 0})}
    )
    scale = ScaleOptions(shards=2, shard_root=s3.url(tmp_path.name))
    shard = shard_config(cfg, scale, cfg.fingerprint(), 0)
    unreachable = f"http://127.0.0.1:{free_port()}/v1"
    first = eval_shard(shard, base_url=unreachable, return_state=True)
    published = PublishedShard(shard.out)
    assert published.committed() is None
    assert sum(c.failed for c in published.checkpoints()) > 0, first
    eval_shard(shard)
    committed = published.committed()
    assert committed is not None and committed.failed == 0
    assert committed.rollouts == len(resolve(shard).keys())
