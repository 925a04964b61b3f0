"""One collector serves a run's batches (gymflow.rollouts.collect.Collector): every batch's
rollouts are committed when its `run` returns, and the count of rollouts in a row that found the
model server gone runs across batch boundaries (it restarted per batch, so a dead server split
across batches never stopped the run). Batches that run at once share one window of
`concurrency` rollouts in flight, the later one filling the slots the earlier one's tail frees."""

from __future__ import annotations

import itertools
import json
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest

from gymflow.core.config import EvalConfig
from gymflow.rollouts import collect
from gymflow.rollouts.collect import Collector
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.rollouts.stopping import RunStopped
from gymflow.simulated.endpoint import local_policy_server
from gymflow.store.db import connect
from gymflow.store.runs import missing_keys


def _plan(out: Path, **config):
    plan = resolve(
        EvalConfig.model_validate(
            {"benchmark": "arithmetic-smoke", "out": str(out), "concurrency": 2, **config}
        )
    )
    with connect(plan.run_dir, create=True) as con:
        register_run(con, plan, resume=False)
    return plan


def _stored(con) -> int:
    return con.execute("SELECT count(*) FROM rollouts").fetchone()[0]


def test_batches_share_one_collector_and_each_is_committed_when_it_returns(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path / "run", limit=6)
    keys = plan.keys()
    with (
        local_policy_server(plan) as server,
        closing(connect(plan.run_dir)) as con,
        Collector(plan, con, base_url=server.base_url) as collector,
    ):
        first = collector.run(keys[:4])
        assert _stored(con) == 4 and missing_keys(con, plan.run_id, keys) == keys[4:]
        second = collector.run(keys[4:])
    assert (first.completed, second.completed) == (4, len(keys) - 4)
    with connect(plan.run_dir, read_only=True) as con:
        assert _stored(con) == len(keys)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_dead_server_count_runs_across_batches(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    plan = _plan(
        tmp_path / "run",
        limit=10,
        stop_after_transport_failures=5,
        model={"kind": "responses", "base_url": url, "max_retries": 0, "backoff_s": 0.0},
    )
    keys = plan.keys()
    with closing(connect(plan.run_dir)) as con, Collector(plan, con, base_url=url) as collector:
        first = collector.run(keys[:3])  # 3 transport failures in a row: under the limit
        assert first.failed == 3
        with pytest.raises(RunStopped) as stopped:
            collector.run(keys[3:])  # the 4th and 5th in a row trip it
        assert stopped.value.cause == "dead_server"
        assert "5 rollouts in a row" in str(stopped.value)
        with pytest.raises(RunStopped):
            collector.run(keys[9:])  # a tripped collector runs nothing more
        assert _stored(con) < 10


def _served(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/_gymflow/stats") as reply:
        return json.loads(reply.read())


def test_batches_at_once_share_one_window_the_later_filling_the_earlier_tail(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path / "run", limit=6, model={"kind": "local", "faults": {"latency_ms": 300}})
    keys = plan.keys()
    first_keys, second_keys = keys[:3], keys[3:]  # concurrency 2: the first ends in a tail of 1
    with (
        local_policy_server(plan) as server,
        closing(connect(plan.run_dir)) as con,
        Collector(plan, con, base_url=server.base_url) as collector,
        ThreadPoolExecutor(2) as threads,
    ):
        first = threads.submit(collector.run, first_keys)
        while _served(server.base_url)["requests"] == 0:  # the first batch holds the window
            time.sleep(0.01)
        second = threads.submit(collector.run, second_keys)
        outcomes = first.result(), second.result()
        peak = _served(server.base_url)["peak_in_flight"]
    assert [o.completed for o in outcomes] == [len(first_keys), len(second_keys)]
    assert peak == 2, "never more in flight than the concurrency"
    with connect(plan.run_dir, read_only=True) as con:
        times = {
            (task_id, repeat): (started, finished)
            for task_id, repeat, started, finished in con.execute(
                "SELECT task_id, repeat_index, started_at, finished_at FROM rollouts"
            ).fetchall()
        }
    assert set(times) == set(keys)
    first_starts = [times[k][0] for k in first_keys]
    second_start = min(times[k][0] for k in second_keys)
    # the second batch waited for the first one's last start, then ran beside its tail
    assert max(first_starts) <= second_start < max(times[k][1] for k in first_keys)


def test_full_groups_commit_at_most_once_a_spacing(tmp_path: Path, monkeypatch) -> None:
    """A commit costs about 20 ms of CPU beyond its rows, so a writer fast enough to take every
    group of `FLUSH_EVERY` as it filled committed twenty times a second at zero latency: a full
    group waits until `FLUSH_SPACING_S` after the last commit began (the first commits at
    once), and every rollout is still committed."""
    commits: list[tuple[float, int]] = []
    handed = collect._Committer.commit

    async def commit(self, batch) -> None:  # when each group is handed to the writer
        commits.append((time.monotonic(), len(batch)))
        await handed(self, batch)

    # a writer that never keeps a group waiting
    monkeypatch.setattr(collect, "write_rollouts", lambda _con, batch: len(batch))
    monkeypatch.setattr(collect._Committer, "commit", commit)
    # each call takes 50 ms, so 64 at a time fill a group at most every 0.16 s and the run
    # outlasts several spacings however fast the machine (at zero latency a quiet CI machine
    # finished it within one spacing: two commits, no gap to measure)
    faults = {"latency_ms": 50}
    plan = _plan(
        tmp_path / "run", repeats=40, concurrency=64, model={"kind": "local", "faults": faults}
    )
    keys = plan.keys()
    with (
        local_policy_server(plan) as server,
        closing(connect(plan.run_dir)) as con,
        Collector(plan, con, base_url=server.base_url) as collector,
    ):
        collector.run(keys)
    assert sum(size for _, size in commits) == len(keys)
    assert len(keys) * 0.05 / 64 > 3 * collect.FLUSH_SPACING_S, len(keys)
    assert commits[0][1] == collect.FLUSH_EVERY
    starts = [at for at, _ in commits[:-1]]  # the last: the batch's end, whenever it comes
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert gaps and min(gaps) >= collect.FLUSH_SPACING_S - 0.01, gaps
