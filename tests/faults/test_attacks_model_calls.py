"""Model calls, sealed (issue 42). No seal covered a model call: an attacker edited a call's
latency and cached tokens in the store and nothing noticed, and the calls are what health's call
checks, the decision's agent-record checks (calls the proxy refused or took after the deadline),
the tools offered, the simulated-model flag and the ATIF export read.

Now every model call is sealed as every rollout is (`store/sealed_rows.py`, `meta.calls_seal`):
an edited, added or deleted call fails `calls_edited` in health (an integrity failure, exit 2),
makes `gym eval profile` and `reverify --check` exit 2, and every writer (a new verifier
version, an export) refuses the store with nothing written. A store sealed before the calls were
(seal record version 3) is refused until `gym eval migrate` seals them; a version 3 record put
back in a later store is an edit; a merged and an imported store are sealed whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import gym
from tests.conftest import gym_in_process as read
from tests.faults.stores import (
    as_an_older_gymflow_left_it,
    collect_run,
    edit_store,
    gym_env,
    imported_copy,
    one_error_line,
    query,
    rollout_rows,
    tree_digest,
)

#: One rollout's model calls (the first by id).
VICTIM = "rollout_id = (SELECT min(rollout_id) FROM model_calls)"
#: Each edit of a sealed model call, with the health checks other than `calls_edited` that see
#: it too (none for a call's latency and cached tokens: nothing but the seal reads them).
EDITS = {
    "latency": (f"UPDATE model_calls SET latency_s = 0.001 WHERE {VICTIM}", set()),
    "cached tokens": (
        f"UPDATE model_calls SET cached_tokens = coalesce(cached_tokens, 0) + 1000 WHERE {VICTIM}",
        set(),
    ),
    # a call's counts no longer sum to its rollout's
    "tokens": (
        f"UPDATE model_calls SET input_tokens = input_tokens + 7, output_tokens = 1 WHERE {VICTIM}",
        {"token_mismatch"},
    ),
    # an answered call read as one the recording proxy refused (the agent-record evidence)
    "status": (
        f"UPDATE model_calls SET status = 'error', failure_kind = 'proxy_refused' WHERE {VICTIM}",
        {"last_call_failed", "proxy_refused_calls"},
    ),
    "deleted": (f"DELETE FROM model_calls WHERE {VICTIM}", {"no_model_calls", "token_mismatch"}),
}


def _numbers(run: Path, cwd: Path) -> dict:
    """Every number health and profile give of the run: health's exit code, verdict, gate
    failures and every check's count; profile's exit code, whether its seals read intact, and
    the rest of its JSON (every score, interval, coverage and usage figure)."""
    checked = read("eval", "health", str(run), "--json", "--verify-seals", cwd=cwd)
    health = json.loads(checked.stdout)
    done = read("eval", "profile", str(run), "--json", cwd=cwd)
    profile = json.loads(done.stdout)
    seals = profile.pop("seals")
    return {
        "health": (checked.returncode, health["verdict"], sorted(health["gate_failures"])),
        "counts": {name: check["count"] for name, check in health["checks"].items()},
        "calls_check": health["checks"]["calls_edited"]["status"],
        "profile": (done.returncode, seals["intact"], profile),
        "edited": seals["edited"],
    }


@pytest.fixture(scope="module")
def honest(tmp_path_factory, prefect_api: str) -> Path:
    """A real `gym eval run` store: 10 tasks x 2 repeats against the simulated model."""
    folder = tmp_path_factory.mktemp("calls")
    done = gym(
        "eval", "run", "--benchmark", "arithmetic-smoke", "--limit", "10", "--repeats", "2",
        "--out", "run", cwd=folder, env=gym_env(prefect_api),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / "run"


def _copy(honest: Path, folder: Path) -> Path:
    run = folder / "run"
    shutil.copytree(honest, run)
    return run


def _calls_record(run: Path) -> tuple[int, int]:
    """(the count the calls' seal record holds, the calls the store holds)."""
    ((record,),) = query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'calls_seal'")
    ((held,),) = query(run / "gymflow.duckdb", "SELECT count(*) FROM model_calls")
    return int(str(record).partition(":")[0]), held


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_model_call_reads_as_tampered(honest: Path, tmp_path: Path, edit: str) -> None:
    run = _copy(honest, tmp_path)
    before = _numbers(run, tmp_path)
    assert before["health"] == (0, "healthy", []) and before["calls_check"] == "ok"
    assert before["profile"][:2] == (0, True)
    sql, also_seen = EDITS[edit]
    edit_store(run, sql)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    # health: the seal sees it, and only the checks that read the edited value besides
    changed = {name for name, n in after["counts"].items() if n != before["counts"][name]}
    assert changed == {"calls_edited", *also_seen}, (before["counts"], after["counts"])
    assert after["counts"]["calls_edited"] == 1  # the run's one row
    code, verdict, failures = after["health"]
    assert (code, verdict) == (2, "unhealthy") and "calls_edited" in failures, after["health"]
    # profile: every number as before (none is read from the calls), the seals read as edited
    assert after["profile"][2] == before["profile"][2]
    assert after["profile"][:2] == (2, False)
    assert after["edited"] == [
        "the model calls' statuses, latencies, tokens or bodies not as sealed"
    ]
    checked = read("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "model calls do not match their seal" in " ".join(checked.stdout.split())
    # every writer refuses to build on it: a new verifier version, an export
    for command in (
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
        ("export", str(run), "--format", "atif", "--out", str(tmp_path / "atif")),
    ):
        done = read(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "model calls' statuses, failure kinds, latencies" in one_error_line(done.stderr)
    assert not list((tmp_path / "atif").rglob("*"))  # its folder is made first, left empty
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def test_a_store_sealed_before_its_calls_is_refused_until_migrated_which_seals_them(
    honest: Path, tmp_path: Path
) -> None:
    """A version 3 store (its rollouts' record's count unkeyed) is refused by reads and writers
    naming `gym eval migrate` (`test_attacks_seal_counts.py`); an edit of a call cannot be
    seen by the migration (what a version 3 store is): it seals the calls as they are then, and
    every number reads as before."""
    run = _copy(honest, tmp_path)
    before = _numbers(run, tmp_path)
    as_an_older_gymflow_left_it(run, 3)
    refused = read("eval", "health", str(run), cwd=tmp_path)
    assert refused.returncode == 1
    assert f"run `gym eval migrate {run}`" in one_error_line(refused.stderr)
    edit_store(run, EDITS["latency"][0])
    read("eval", "migrate", str(run), cwd=tmp_path, check=True)
    migrated = _numbers(run, tmp_path)
    assert migrated == before, (migrated, before)
    # its next writer adds to the calls' record as to any other
    read("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    count, held = _calls_record(run)
    assert count == held > 0
    sealed = _numbers(run, tmp_path)
    assert sealed["health"] == (0, "healthy", []) and sealed["calls_check"] == "ok"
    edit_store(run, EDITS["cached tokens"][0])
    assert _numbers(run, tmp_path)["health"] == (2, "unhealthy", ["calls_edited"])


def _version_3_record_put_back(run: Path) -> None:
    """What an attacker holding a store this key sealed under version 3 does: its record (the
    same in every such store with no verdict from before the seal) put in place of this one's,
    the calls' seal deleted, then a call's latency and cached tokens edited. The task list's
    seal, which needs the key, stays as this store's writers left it (version 4's label)."""
    from gymflow.store.seal import _record
    from gymflow.store.seal_key import load_key

    key = load_key(create=False)
    assert key is not None
    edit_store(
        run,
        "DELETE FROM meta WHERE key = 'calls_seal'",
        f"UPDATE meta SET value = '{_record(key, 0, version=3)}' WHERE key = 'seal'",
        f"UPDATE model_calls SET latency_s = 0.001, cached_tokens = 1000 WHERE {VICTIM}",
    )


@pytest.mark.parametrize("where", ["sealed here", "moved"])
def test_a_version_3_record_put_back_is_an_edit(honest: Path, tmp_path: Path, where: str) -> None:
    """Where this machine sealed the store (its sealed-stores ledger says under a later
    version) the calls' seal is required and its removal is `calls_edited`; anywhere (a moved
    folder, which the ledger does not name) the rollouts' record, which this key wrote with its
    count keyed (version 6), says the same; and the task list sealed under the later version's
    label no longer matches under a version 3 record: `task_list_edited`. Either way `--check`
    exits 2, every writer refuses and nothing is written."""
    from gymflow.store.seal import RECORD_VERSION
    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_stores import remember

    run = _copy(honest, tmp_path)
    if where == "sealed here":
        key = load_key(create=False)
        assert key is not None
        remember(run / "gymflow.duckdb", key, version=RECORD_VERSION)  # as the owner's gymflow did
    before = _numbers(run, tmp_path)
    _version_3_record_put_back(run)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["health"] == (2, "unhealthy", ["calls_edited", "task_list_edited"]), after[
        "health"
    ]
    assert after["profile"][2] == before["profile"][2] and after["profile"][:2] == (2, False)
    checked = read("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "task list does not match its seal" in " ".join(checked.stdout.split())
    done = read("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path)
    assert done.returncode == 2 and "nothing was written" in one_error_line(done.stderr)
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def _sealed_whole_and_checked(run: Path, cwd: Path) -> None:
    """The store's calls' seal holds every call and matches (health checks it: `ok`, healthy);
    one call's latency edited, it fails `calls_edited`."""
    count, held = _calls_record(run)
    assert count == held > 0
    numbers = _numbers(run, cwd)
    assert numbers["health"] == (0, "healthy", []) and numbers["calls_check"] == "ok"
    edit_store(run, EDITS["latency"][0])
    assert _numbers(run, cwd)["health"] == (2, "unhealthy", ["calls_edited"])


def test_a_merged_run_store_seals_its_calls(tmp_path: Path, prefect_api: str) -> None:
    """`gym eval run --shards 2`: each shard's calls folded in per batch, the merged store's
    computed whole by the merge."""
    done = gym(
        "eval", "run", "--benchmark", "arithmetic-smoke", "--limit", "6", "--shards", "2",
        "--out", "merged", cwd=tmp_path, env=gym_env(prefect_api),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _sealed_whole_and_checked(tmp_path / "merged", tmp_path)


def test_an_imported_store_seals_its_calls(tmp_path: Path) -> None:
    """`gym import nemo-gym` of a gymflow export: the import's first seal record seals them."""
    run = collect_run(tmp_path / "source")
    _sealed_whole_and_checked(imported_copy(run, tmp_path, read), tmp_path)


def test_a_resumes_set_aside_folds_the_calls_out(tmp_path: Path) -> None:
    """A resume sets a transiently failed rollout aside with its calls (`superseded.py`): both
    records lose them in the same transaction, and still match what the store holds."""
    import duckdb

    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_rows import MODEL_CALLS, ROLLOUTS, rows_sealed
    from gymflow.store.superseded import supersede_failed
    from tests.faults.stores import resealed

    run = collect_run(tmp_path / "run")
    store = run / "gymflow.duckdb"
    # as a writer stores a transport failure (sealed as it is), before the owner resumes
    edit_store(
        run,
        "UPDATE rollouts SET status = 'failed', failure_kind = 'transport' "
        "WHERE rollout_id = (SELECT min(rollout_id) FROM rollouts)",
    )
    resealed(store)
    count, held = _calls_record(run)
    con = duckdb.connect(str(store))
    try:
        key = load_key(create=False)
        assert key is not None
        (run_id,) = con.execute("SELECT run_id FROM runs").fetchone() or ("",)
        assert supersede_failed(con, run_id, ("transport",)) == 1
        assert rows_sealed(con, key, ROLLOUTS) is True
        assert rows_sealed(con, key, MODEL_CALLS) is True
    finally:
        con.close()
    after, left = _calls_record(run)
    assert count == held and after == left < held
