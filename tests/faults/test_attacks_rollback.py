"""An older sealed state of a store put back in place (issue 42, attacker's pass 4, a07), and the
model server's report edited (a05).

a07: every state a store passes through is sealed by the owner's key. The owner made a lenient
what-if version current (pass@1 100%) and went back to the original (60%); the attacker had
copied the file's bytes in between and wrote them back in place: pass@1 100%, health healthy
(gate pass), `reverify --check` "every verdict matches its seal", diagnose's next action
"none". Now every writer raises the store's generation, sealed with its seal records, and this
machine records beside the key the highest generation each store path reached
(`store/generations.py`): the older state reads `seal_rolled_back` (integrity), with one line
naming the path and both generations; profile and `--check` exit 2 and every writer refuses,
nothing written. A store copied to a new path, a new store where an older one was deleted and a
store an older gymflow sealed (no generation) still open.

a05: `meta.server_report` was in no seal, and `profile --compare` reads it as a factor: edited,
"only sampling.seed differs" became "3 factors differ". It is sealed with the run's inputs now
(`store/sealed_inputs.py`): `inputs_edited`, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import (
    as_an_older_gymflow_left_it,
    collect_run,
    edit_store,
    one_error_line,
    query,
    rollout_rows,
    tree_digest,
)


def _numbers(run: Path, cwd: Path) -> dict:
    """Every number the run gives and what health, profile, diagnose and `--check` say of it."""
    checked = gym("eval", "health", str(run), "--json", cwd=cwd)
    report = json.loads(checked.stdout)
    read = gym("eval", "profile", str(run), "--json", cwd=cwd)
    profiled = json.loads(read.stdout)
    diagnosed = gym("eval", "diagnose", str(run), "--json", cwd=cwd)
    recheck = gym("eval", "reverify", str(run), "--check", cwd=cwd)
    return {
        "health": (checked.returncode, report["verdict"], sorted(report["gate_failures"])),
        "notes": report["seal_notes"],
        "profile": (read.returncode, profiled["pass@1"], profiled["pass@k"]),
        "seals": profiled["seals"]["edited"],
        "diagnose": (diagnosed.returncode, json.loads(diagnosed.stdout)["decision"]["action"]),
        "check": recheck.returncode,
    }


def _generation(run: Path) -> int:
    return int(
        query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'generation'")[0][
            0
        ].partition(":")[0]
    )


def _written_back(run: Path, older: bytes) -> None:
    """The attacker's copy written over the store's file in place (same inode)."""
    with (run / "gymflow.duckdb").open("r+b") as store:
        store.write(older)
        store.truncate()


def _what_if_and_back(tmp_path: Path) -> tuple[Path, bytes, dict]:
    """The owner's run, a lenient what-if made current and the original chosen again; the
    attacker's copy of the file taken while the what-if was current; the honest numbers."""
    run = collect_run(tmp_path / "run", limit=20, repeats=2)
    original = query(run / "gymflow.duckdb", "SELECT verifier_version FROM runs")[0][0]
    gym(
        "eval", "reverify", str(run), "--set", "abs_tol=1000", "--make-current",
        cwd=tmp_path, check=True,
    )  # fmt: skip
    older = (run / "gymflow.duckdb").read_bytes()
    gym("eval", "use-version", str(run), original, cwd=tmp_path, check=True)
    honest = _numbers(run, tmp_path)
    assert honest["health"] == (0, "healthy", []) and honest["check"] == 0
    assert honest["profile"][1] < 1.0 and honest["notes"] == [] and honest["seals"] == []
    return run, older, honest


def test_an_older_sealed_state_put_back_is_refused_everywhere(tmp_path: Path) -> None:
    run, older, honest = _what_if_and_back(tmp_path)
    now = _generation(run)
    _written_back(run, older)
    was = _generation(run)
    assert was < now
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    # what the older state gives the numbers (the what-if's), and what every reader says
    assert after["profile"][1] == 1.0 > honest["profile"][1]
    assert after["health"] == (2, "unhealthy", ["seal_rolled_back"]), after
    line = f"{run / 'gymflow.duckdb'}: generation {was} of this store, but"
    assert [note.startswith(line) for note in after["notes"]] == [True], after["notes"]
    assert f"to generation {now}: an older copy of it was put back" in after["notes"][0]
    assert after["profile"][0] == 2 and len(after["seals"]) == 1 and line in after["notes"][0]
    assert after["check"] == 2
    verified = gym("eval", "health", str(run), "--verify-seals", cwd=tmp_path)
    said = " ".join(verified.stdout.split())  # a long line wraps at the terminal's width
    assert verified.returncode == 2 and f"generation {was} of this store" in said
    checked = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert f"to generation {now}: an older copy" in " ".join(checked.stdout.split())
    # every writer refuses, in one line naming the path and both generations; nothing written
    original = query(run / "gymflow.duckdb", "SELECT verifier_version FROM runs")[0][0]
    for command in (
        ("eval", "use-version", str(run), original),
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
    ):
        done = gym(*command, cwd=tmp_path)
        refusal = one_error_line(done.stderr)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"generation {was} of this store" in refusal and f"generation {now}:" in refusal
        assert f"{run / 'gymflow.duckdb'}: " in refusal and "nothing was written" in refusal
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest
    # the same bytes in a folder of their own open: a copy kept on purpose
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "gymflow.duckdb").write_bytes(older)
    assert _numbers(kept, tmp_path)["health"] == (0, "healthy", [])


def test_a_newer_generation_record_copied_into_an_older_state_is_an_edit(
    tmp_path: Path,
) -> None:
    """The attacker keeps the older state but gives it the current state's generation record,
    so its number is not below the ledger's: the record is sealed with the newer state's seal
    records and does not hold over the older one's. Moved to a new path too (no ledger there),
    it fails the same way."""
    run, older, honest = _what_if_and_back(tmp_path)
    newer = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'generation'")[0][0]
    _written_back(run, older)
    edit_store(run, f"UPDATE meta SET value = '{newer}' WHERE key = 'generation'")
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    for store in (run, moved):
        stored, digest = rollout_rows(store / "gymflow.duckdb"), tree_digest(store)
        after = _numbers(store, tmp_path)
        assert after["profile"][1] == 1.0 > honest["profile"][1]
        assert after["health"] == (2, "unhealthy", ["seal_rolled_back"]), after
        assert "generation record is not the one its writers sealed" in after["notes"][0]
        assert after["profile"][0] == 2 and after["check"] == 2
        done = gym("eval", "reverify", str(store), "--set", "abs_tol=0.5", cwd=tmp_path)
        assert done.returncode == 2 and "generation record" in one_error_line(done.stderr)
        assert rollout_rows(store / "gymflow.duckdb") == stored and tree_digest(store) == digest


def test_copies_new_stores_and_older_gymflows_stores_open(tmp_path: Path) -> None:
    """What must not read as a rollback: a run folder copied to a new path (and written there);
    a new run at a path whose older run was deleted; a store an older gymflow sealed (record
    version 4, no generation), which `gym eval migrate` gives one, and whose older bytes put
    back after that are refused."""
    run = collect_run(tmp_path / "run", limit=10)
    honest = _numbers(run, tmp_path)
    assert honest["health"] == (0, "healthy", [])
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert _numbers(copy, tmp_path) == honest
    gym("eval", "reverify", str(copy), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    assert _numbers(copy, tmp_path)["health"] == (0, "healthy", [])
    assert _numbers(run, tmp_path) == honest

    # the run deleted and made again at its path: a new history there
    gym("eval", "reverify", str(run), "--set", "abs_tol=0.25", cwd=tmp_path, check=True)
    shutil.rmtree(run)
    again = collect_run(tmp_path / "run", limit=10)
    assert _numbers(again, tmp_path) == honest

    # an older gymflow's store: refused until migrated, which gives it a generation
    older = tmp_path / "older"
    shutil.copytree(run, older)
    as_an_older_gymflow_left_it(older, 4)
    assert not query(older / "gymflow.duckdb", "SELECT * FROM meta WHERE key = 'generation'")
    refused = gym("eval", "health", str(older), cwd=tmp_path)
    assert refused.returncode == 1 and "gym eval migrate" in one_error_line(refused.stderr)
    as_left = (older / "gymflow.duckdb").read_bytes()
    gym("eval", "migrate", str(older), cwd=tmp_path, check=True)
    assert _numbers(older, tmp_path) == honest
    gym("eval", "reverify", str(older), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    assert query(older / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'seal'")[0][0]
    assert _generation(older) > 0
    migrated = _numbers(older, tmp_path)
    assert migrated["health"] == (0, "healthy", []), migrated
    _written_back(older, as_left)
    put_back = _numbers(older, tmp_path)
    # its rows' records as version 4 wrote them: the ledger says version 6 sealed this path
    assert put_back["health"] == (
        2,
        "unhealthy",
        ["calls_edited", "rollouts_edited", "seal_rolled_back"],
    ), put_back
    assert put_back["notes"][0].startswith(f"{older / 'gymflow.duckdb'}: generation 0 of this")


def _attribution(a: Path, b: Path, cwd: Path) -> tuple[int, list, str | None]:
    done = gym("eval", "profile", str(a), "--compare", str(b), "--json", cwd=cwd)
    compared = json.loads(done.stdout)
    factors = [(f["factor"], f["a"], f["b"]) for f in compared["factors"]]
    return done.returncode, factors, compared["attribution"]


def test_an_edited_server_report_is_an_integrity_failure(tmp_path: Path) -> None:
    """Two runs that differ only in their seed, each with the report its server gave (written
    by gymflow's writer, sealed with the inputs); the attacker writes other reports into both
    files. The comparison would blame the server; both stores now fail `inputs_edited`,
    `profile --compare` exits 2, and a writer refuses them."""
    from gymflow.store.db import connect
    from gymflow.store.server_reports import record_server_report

    report = {"model": "Qwen3-8B-BF16", "engine": "vllm 0.9"}
    runs = []
    for name, seed in (("a", 1), ("b", 2)):
        run = collect_run(tmp_path / name, limit=10, sampling={"seed": seed})
        con = connect(run)
        try:
            record_server_report(con, report, str(run))
        finally:
            con.close()
        runs.append(run)
    a, b = runs
    before = [_numbers(run, tmp_path) for run in runs]
    assert [n["health"] for n in before] == [(0, "healthy", [])] * 2
    code, factors, attribution = _attribution(a, b, tmp_path)
    assert code == 0 and factors == [("sampling.seed", 1, 2)], factors
    assert attribution is not None and attribution.startswith("only the sampling differs")

    for run, told in ((a, "Qwen3-8B-Q2_K (2-bit)"), (b, "Qwen3-8B-BF16")):
        edit_store(
            run,
            "INSERT OR REPLACE INTO meta VALUES ('server_report', "
            f"'{json.dumps({'model': told, 'engine': 'llama.cpp b1' if run == a else 'vllm'})}')",
        )
    stored = [(rollout_rows(run / "gymflow.duckdb"), tree_digest(run)) for run in runs]
    after = [_numbers(run, tmp_path) for run in runs]
    for now, then in zip(after, before, strict=True):
        assert now["health"] == (2, "unhealthy", ["inputs_edited"]), now["health"]
        assert now["profile"][1:] == then["profile"][1:] and now["profile"][0] == 2
        assert now["check"] == 2
    code, factors, _ = _attribution(a, b, tmp_path)
    assert code == 2 and len(factors) == 3  # what the edit says, flagged
    done = gym("eval", "reverify", str(a), "--set", "abs_tol=0.5", cwd=tmp_path)
    assert done.returncode == 1 and "edited in the file; nothing written" in one_error_line(
        done.stderr
    )
    assert [(rollout_rows(r / "gymflow.duckdb"), tree_digest(r)) for r in runs] == stored


def test_an_older_stores_server_report_is_sealed_by_its_migration(tmp_path: Path) -> None:
    """A store an older gymflow wrote kept its report unsealed (inputs MAC version 1): an edit
    of its report cannot be seen by its migration (`gym eval migrate`, which every read and
    writer of it asks for), which seals the report as it is then, after which an edit is
    `inputs_edited`."""
    from gymflow.store.db import connect
    from gymflow.store.server_reports import record_server_report

    run = collect_run(tmp_path / "run", limit=10)
    con = connect(run)
    try:
        record_server_report(con, {"model": "m", "engine": "e"}, str(run))
    finally:
        con.close()
    older = tmp_path / "older"
    shutil.copytree(run, older)
    as_an_older_gymflow_left_it(older, 4)
    edit_store(older, """UPDATE meta SET value = '{"model": "x"}' WHERE key = 'server_report'""")
    gym("eval", "migrate", str(older), cwd=tmp_path, check=True)
    con = duckdb.connect(str(older / "gymflow.duckdb"), read_only=True)
    record = con.execute("SELECT value FROM meta WHERE key = 'server_report'").fetchone()
    con.close()
    assert record is not None and json.loads(record[0]) == {"model": "x"}
    assert _numbers(older, tmp_path)["health"] == (0, "healthy", [])
    edit_store(older, """UPDATE meta SET value = '{"model": "y"}' WHERE key = 'server_report'""")
    assert _numbers(older, tmp_path)["health"] == (2, "unhealthy", ["inputs_edited"])


def test_a_shard_put_back_to_an_older_state_is_not_merged(tmp_path: Path) -> None:
    """The merge checks a private snapshot of each shard: its generation is compared with the
    one recorded at the shard's own path, and an older state of the shard is refused, nothing
    merged."""
    shards = [collect_run(tmp_path / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]
    older = (shards[1] / "gymflow.duckdb").read_bytes()
    gym("eval", "reverify", str(shards[1]), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    now = _generation(shards[1])
    _written_back(shards[1], older)
    was = _generation(shards[1])
    digest = tree_digest(shards[1])
    merged = tmp_path / "merged"
    done = gym("eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path)
    refusal = one_error_line(done.stderr)
    assert done.returncode != 0 and f"generation {was} of this store" in refusal, refusal
    assert f"to generation {now}:" in refusal and str(shards[1]) in refusal
    assert not (merged / "gymflow.duckdb").exists() and tree_digest(shards[1]) == digest


def test_a_write_that_rolls_back_records_no_generation(tmp_path: Path) -> None:
    """The generation is recorded beside the key only once the writer's transaction has
    committed: one that failed after raising it (a disk full at its commit, a kill) leaves the
    store at its generation and the record with it, and the store opens healthy."""
    from gymflow.store.db import connect, transaction
    from gymflow.store.generations import recorded_at
    from gymflow.store.seal import claim, seal_tasks
    from gymflow.store.seal_key import load_key

    run = collect_run(tmp_path / "run", limit=4)
    key = load_key(create=False)
    assert key is not None
    store = run / "gymflow.duckdb"
    at = _generation(run)
    assert recorded_at(key, store) == at > 0
    con = connect(run)
    try:
        with pytest.raises(RuntimeError), transaction(con):
            seal_tasks(con, claim(con, str(run)))
            raise RuntimeError("the commit never happens")
    finally:
        con.close()
    assert _generation(run) == recorded_at(key, store) == at
    assert _numbers(run, tmp_path)["health"] == (0, "healthy", [])
    con = connect(run)
    try:
        with transaction(con):
            seal_tasks(con, claim(con, str(run)))
    finally:
        con.close()
    assert _generation(run) == recorded_at(key, store) == at + 1


def test_a_copy_gymflow_makes_over_an_older_one_opens(tmp_path: Path) -> None:
    """A study's arm starts from a copy of its base run's store (`db.copy_store`): copied
    again over an arm a writer took further, the copy's generation starts above the arm's, so
    it opens, and the arm's earlier store put back is refused; the source's own record is
    untouched."""
    from gymflow.store.db import copy_store

    base = collect_run(tmp_path / "base", limit=4)
    arm = tmp_path / "arm"
    arm.mkdir()
    copy_store(base, arm)
    gym("eval", "reverify", str(arm), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    earlier, further = (arm / "gymflow.duckdb").read_bytes(), _generation(arm)
    assert further > _generation(base)
    copy_store(base, arm)
    assert _generation(arm) == further + 1
    assert _numbers(arm, tmp_path)["health"] == (0, "healthy", [])
    assert _numbers(base, tmp_path)["health"] == (0, "healthy", [])
    _written_back(arm, earlier)
    assert _numbers(arm, tmp_path)["health"] == (2, "unhealthy", ["seal_rolled_back"])


def _raised(run: Path, cwd: Path, times: int) -> None:
    """The run's store taken `times` generations further by its writers (reverify)."""
    for i in range(times):
        tol = 0.5 / 2**i
        gym("eval", "reverify", str(run), "--set", f"abs_tol={tol}", cwd=cwd, check=True)


def test_a_merge_or_a_restore_where_a_deleted_store_was_opens(tmp_path: Path) -> None:
    """A merge into the folder of a deleted run, and a shard's checkpoints restored where a
    store was (a retried shard's local store), make new stores at those paths: their
    generations start above the deleted store's, and they open healthy (the merge read
    `seal_rolled_back`, exit 2, before). The path's history goes on from there: an older state
    of the merged store put back is refused, and so is one with its seal and generation
    records deleted, which no writer takes for a new store."""
    from gymflow.rollouts.published import PublishedShard

    shards = [collect_run(tmp_path / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]
    reference = tmp_path / "reference"
    gym("eval", "aggregate", *map(str, shards), "--out", str(reference), cwd=tmp_path, check=True)
    expected = _numbers(reference, tmp_path)
    assert expected["health"] == (0, "healthy", []) and expected["check"] == 0

    run = collect_run(tmp_path / "run", limit=10)
    _raised(run, tmp_path, 3)
    deleted = _generation(run)
    shutil.rmtree(run)
    gym("eval", "aggregate", *map(str, shards), "--out", str(run), cwd=tmp_path, check=True)
    assert _generation(run) > deleted
    assert _numbers(run, tmp_path) == expected

    # the merged store's history goes on: its older state put back is refused
    older = (run / "gymflow.duckdb").read_bytes()
    _raised(run, tmp_path, 1)
    _written_back(run, older)
    put_back = _numbers(run, tmp_path)
    assert put_back["health"] == (2, "unhealthy", ["seal_rolled_back"]), put_back
    # ... and with its seal and generation records deleted, it is no new store to a merge
    edit_store(run, "DELETE FROM meta WHERE key IN ('seal', 'generation')")
    digest = tree_digest(run)
    done = gym("eval", "aggregate", *map(str, shards), "--out", str(run), cwd=tmp_path)
    refusal = one_error_line(done.stderr)
    assert done.returncode == 2 and f"{run / 'gymflow.duckdb'}: generation 0 of this" in refusal
    assert tree_digest(run) == digest

    # a shard's checkpoints restored where a store went further before
    shard = PublishedShard(f"file://{tmp_path / 'root'}/run/shard-0-of-2")
    shard.checkpoint(shards[0], "a1", 0, set())
    local = collect_run(tmp_path / "local", limit=10)
    _raised(local, tmp_path, 3)
    shutil.rmtree(local)
    shard.restore(local)
    assert rollout_rows(local / "gymflow.duckdb") == rollout_rows(shards[0] / "gymflow.duckdb")
    numbers = _numbers(local, tmp_path)
    assert numbers["notes"] == [] and numbers["seals"] == [] and numbers["check"] == 0, numbers
    assert "seal_rolled_back" not in numbers["health"][2]


def test_a_confirmation_made_again_opens(tmp_path: Path) -> None:
    """`gym eval decide RUN --confirm` judges a copy of the run again (`study/confirm.py`) in
    the run's `confirm/FACTOR` folder, replacing an earlier confirmation's copy: that copy was
    taken a generation further by its reverify, and the new copy of the run read as that
    one put back ("generation 2 of this store ... to generation 3"; the second confirmation
    refused). The copy is gymflow's own now (`db.copy_store`): its history starts where the
    run's is, and the same confirmation made twice gives the same outcome."""
    from gymflow.analysis.results import Experiment
    from gymflow.study.confirm import confirm

    run = collect_run(tmp_path / "run", limit=6)
    tasks = [row[0] for row in query(run / "gymflow.duckdb", "SELECT task_id FROM tasks")]
    experiment = Experiment(
        action="verifier_repair",
        factor="verifier_params",
        change={"verifier_params": {"abs_tol": 0.5}},
        kind="reverify",
        tasks=tasks,
        predicted="a lenient tolerance passes more answers",
        how="judge the stored answers again with abs_tol 0.5",
    )
    first = confirm(run, experiment)
    assert first is not None and first.ran
    second = confirm(run, experiment)
    assert second == first
    copy = Path(str(second.run_dir))
    assert _numbers(copy, tmp_path)["health"] == (0, "healthy", [])
    assert _numbers(run, tmp_path)["health"] == (0, "healthy", [])
