"""Each `gym eval run` of a config is a collection of its own (attack pass 8, F3): with
`--shard-root`, a second run of an unchanged config collected nothing and reported the first
run's numbers (its shard folders were named by the config's hash alone, so they were resumed, or
their committed result restored). Now a later run asks the model again, at a path shard root and
at an S3 one (SeaweedFS); `--resume` of an interrupted sharded run continues that collection;
and shards written before collections are never continued, and said so."""

from __future__ import annotations

import re
import signal
from datetime import datetime
from pathlib import Path

import pytest

from gymflow.cli import exit_codes
from gymflow.store.remote import Remote
from tests.conftest import free_port
from tests.faults.stores import query, run_gym
from tests.faults.test_run_control import ModelServer, Running

CONFIG = """\
benchmark: arithmetic-smoke
limit: 30
model: {{kind: responses, base_url: "http://127.0.0.1:{port}/v1", name: my-checkpoint}}
"""


def _pass_at_1(stdout: str) -> str:
    [line] = [line for line in stdout.splitlines() if line.startswith("pass@1 =")]
    return line


def collections_at(run_root: str) -> list[str]:
    """The collection folders under `ROOT/RUN_ID`, listed here (not by the code under test, so
    that this module also runs, and fails, on a gymflow before collections)."""
    if run_root.startswith("s3://"):
        names = {name.split("/", 1)[0] for name in Remote(run_root).find("") if "/" in name}
    else:
        names = {p.name for p in Path(run_root).iterdir()} if Path(run_root).is_dir() else set()
    return sorted(name for name in names if re.match(r"c\d{8}T\d{6}-[0-9a-f]{8}$", name))


def _created(out: Path) -> datetime:
    return query(out / "gymflow.duckdb", "SELECT created_at FROM runs")[0][0]


@pytest.mark.parametrize("where", ["path", "s3"])
def test_a_second_run_of_an_unchanged_config_asks_the_new_model(
    where: str, tmp_path: Path, prefect_api: str, request: pytest.FixtureRequest
):
    """Monday's nightly, then Tuesday's against a new checkpoint behind the same name: Tuesday
    reports Tuesday's model (the numbers a run without a shard root gives), not Monday's."""
    port = free_port()
    config = tmp_path / "nightly.yaml"
    config.write_text(CONFIG.format(port=port))
    if where == "s3":
        root = request.getfixturevalue("s3").url(tmp_path.name)
    else:
        root = str(tmp_path / "shardroot")
    sharded = ["eval", "run", str(config), "--shards", "2", "--shard-root", root]
    model = ModelServer(port, tmp_path)  # another seed: another checkpoint
    try:
        model.start("--seed", "0")
        monday = run_gym(*sharded, "--out", "mon", cwd=tmp_path, prefect_api=prefect_api,
                         check=True)  # fmt: skip
        model.start("--seed", "7")  # Tuesday: a new checkpoint behind the same server and name
        tuesday = run_gym(*sharded, "--out", "tue", cwd=tmp_path, prefect_api=prefect_api,
                          check=True)  # fmt: skip
        truth = run_gym("eval", "run", str(config), "--out", "plain", cwd=tmp_path,
                        prefect_api=prefect_api, check=True)  # fmt: skip
    finally:
        model.stop()
    assert _pass_at_1(monday.stdout) != _pass_at_1(tuesday.stdout)
    assert _pass_at_1(tuesday.stdout) == _pass_at_1(truth.stdout)
    assert _created(tmp_path / "tue") > _created(tmp_path / "mon")
    # each run said which collection it is; two collections of the one run at the root
    said = [
        re.findall(r"collection (c\S+) of run (\w+)", run.stdout + run.stderr)
        for run in (monday, tuesday)
    ]
    [[(first, run_id)], [(second, same_run)]] = said
    assert run_id == same_run and first != second
    assert collections_at(f"{root}/{run_id}") == [first, second]


SLOW = """\
benchmark: arithmetic-smoke
repeats: 20
concurrency: 4
model:
  faults:
    latency_ms: 50
"""
EXPECTED = 50 * 20


def test_resume_continues_the_interrupted_collection(tmp_path: Path, prefect_api: str):
    config = tmp_path / "run.yaml"
    config.write_text(SLOW)
    root = tmp_path / "shardroot"
    args = ["eval", "run", str(config), "--shards", "2", "--shard-root", str(root), "--out", "run"]
    run = Running(args, tmp_path, prefect_api)
    run.wait_collecting()
    run.process.send_signal(signal.SIGINT)
    code, stdout, stderr = run.finish()
    assert code == exit_codes.INTERRUPTED, stderr
    [(started, run_id)] = re.findall(r"collection (c\S+) of run (\w+)", stdout + stderr)
    store = tmp_path / "run" / "gymflow.duckdb"
    before = query(store, "SELECT count(*) FROM rollouts")[0][0]
    assert 0 < before < EXPECTED
    created = _created(tmp_path / "run")

    resumed = run_gym(*args, "--resume", cwd=tmp_path, prefect_api=prefect_api, check=True)
    said = resumed.stdout + resumed.stderr
    assert f"resuming collection {started} of run {run_id}" in said, said
    assert "missing 0" in resumed.stdout
    assert collections_at(str(root / run_id)) == [started]  # continued, not started again
    assert query(store, "SELECT count(DISTINCT (task_id, repeat_index)), count(*) FROM rollouts")[
        0
    ] == (EXPECTED, EXPECTED)
    assert _created(tmp_path / "run") == created


def test_shards_of_an_earlier_gymflow_are_never_continued(tmp_path: Path, prefect_api: str):
    """A shard root written before collections (`ROOT/RUN_ID/shard-I-of-N`): `--resume` says
    there is no collection to continue, names those shards, and collects anew beside them."""
    out, root = tmp_path / "run", tmp_path / "shardroot"
    args = ["eval", "run", "--benchmark", "arithmetic-smoke", "--limit", "6"]
    # an earlier gymflow's shard 0: a shard store with no collection, where it put it
    run_gym(*args, "--shard", "0/2", "--out", "by-hand", cwd=tmp_path, prefect_api=prefect_api,
            check=True)  # fmt: skip
    [(run_id, before)] = query(
        tmp_path / "by-hand" / "gymflow.duckdb",
        "SELECT run_id, (SELECT count(*) FROM rollouts) FROM runs",
    )
    earlier = root / run_id / "shard-0-of-2"
    earlier.parent.mkdir(parents=True)
    (tmp_path / "by-hand").rename(earlier)

    resumed = run_gym(*args, "--shards", "2", "--shard-root", str(root), "--out", str(out),
                      "--resume", cwd=tmp_path, prefect_api=prefect_api, check=True)  # fmt: skip
    said = resumed.stdout + resumed.stderr
    assert f"--resume: no collection of run {run_id} at {root / run_id} to continue" in said
    assert "shards of an earlier gymflow (no collection): not continued" in said
    assert f"gym eval aggregate {earlier} --out DIR" in said
    assert "missing 0" in resumed.stdout
    assert len(collections_at(str(root / run_id))) == 1
    stored = query(earlier / "gymflow.duckdb", "SELECT count(*) FROM rollouts")
    assert stored == [(before,)]  # left as it was
