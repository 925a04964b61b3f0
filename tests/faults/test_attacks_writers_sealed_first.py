"""Every writer checks the seals of what it builds on before it writes (issue 42, second
attacker's pass over 84b21e2): reverify recomputed every seal under its lock before judging,
but `gym eval aggregate` (the shards it copies, the store it merges into), `gym eval run
--resume` and the export an import is made from carried a store whose verdicts were forged or
deleted into a store sealed afresh, or sealed new rows beside them.

Now all of them pass one gate (`store/sealed_first.py`): a seal that does not match, a verdict
deleted or the seals stripped is refused in one line naming the file (exit 2), and nothing is
written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gymflow.store.db import connect
from tests.faults.stores import (
    collect_run,
    edit_store,
    one_error_line,
    rollout_rows,
    run_gym,
    tree_digest,
)

FORGED_OUTPUTS = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)"
)
FORGED_VERDICTS = "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed"
#: The two ways a store's failing verdicts are made passes without the key, and what the
#: refusal says of each.
ATTACKS = {
    "verdicts-forged": ((FORGED_OUTPUTS, FORGED_VERDICTS), "do not match their seal"),
    "verdicts-deleted": (
        (FORGED_OUTPUTS, "DELETE FROM verifications WHERE NOT passed"),
        "verdicts were deleted",
    ),
    # attack pass 7, s03: the failing verdicts moved, seals and all, where a reverify sets aside
    # the ones it judges again; only an errored or carried verdict there excuses a gap
    "verdicts-set-aside": (
        (
            "INSERT INTO superseded_verifications "
            "SELECT *, 1, now()::TIMESTAMP FROM verifications WHERE NOT passed",
            "DELETE FROM verifications WHERE NOT passed",
        ),
        "verdicts were deleted",
    ),
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shards")
    return [collect_run(folder / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def _refused(done, says: str, store: Path) -> str:
    line = one_error_line(done.stderr)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert says in line and str(store) in line and "nothing was written" in line, line
    return line


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_merge_refuses_a_shard_whose_verdicts_were_forged_or_deleted(
    shards: list[Path], tmp_path: Path, prefect_api: str, attack: str
) -> None:
    statements, says = ATTACKS[attack]
    edited = _copy(shards[1], tmp_path / "shard1")
    edit_store(edited, *statements)
    stored, digest = rollout_rows(edited / "gymflow.duckdb"), tree_digest(edited)
    merged = tmp_path / "merged"
    done = run_gym(
        "eval", "aggregate", str(shards[0]), str(edited), "--out", str(merged),
        cwd=tmp_path, prefect_api=prefect_api,
    )  # fmt: skip
    _refused(done, says, edited / "gymflow.duckdb")
    assert not (merged / "gymflow.duckdb").exists()
    assert rollout_rows(edited / "gymflow.duckdb") == stored and tree_digest(edited) == digest


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_merge_refuses_a_destination_whose_verdicts_were_forged_or_deleted(
    shards: list[Path], tmp_path: Path, prefect_api: str, attack: str
) -> None:
    statements, says = ATTACKS[attack]
    merged = tmp_path / "merged"
    run_gym(
        "eval", "aggregate", str(shards[0]), "--out", str(merged),
        cwd=tmp_path, prefect_api=prefect_api, check=True,
    )  # fmt: skip
    edit_store(merged, *statements)
    stored, digest = rollout_rows(merged / "gymflow.duckdb"), tree_digest(merged)
    done = run_gym(
        "eval", "aggregate", str(shards[1]), "--out", str(merged),
        cwd=tmp_path, prefect_api=prefect_api,
    )  # fmt: skip
    _refused(done, says, merged / "gymflow.duckdb")
    assert rollout_rows(merged / "gymflow.duckdb") == stored and tree_digest(merged) == digest


#: Stores planted at `--out` before a merge, each of rows no key sealed (attack pass 16): what
#: the merge kept over the shards' rows (`INSERT OR IGNORE`) and sealed, healthy each time.
PLANTED = {
    # a copy of shard 0 stripped of its seals, every verdict a pass: pass@1 0.917 for 0.75
    "rollouts": (
        "UPDATE verifications SET seal = NULL, passed = true, reward = 1",
        "DELETE FROM meta WHERE key IN ('seal', 'task_seal', 'inputs_seal')",
    ),
    # a new store of shard 0's verdicts alone, unsealed and passing, no rollout
    "verdicts": (
        "INSERT INTO verifications SELECT * REPLACE (NULL AS seal, true AS passed, 1.0 AS reward) "
        "FROM planted_from.verifications",
    ),
    # a new store of the run's row and tasks, forged: the profile named the model and the tags
    "run and tasks": (
        "INSERT INTO runs SELECT * REPLACE ('forged-model' AS model) FROM planted_from.runs",
        "INSERT INTO tasks SELECT * REPLACE (['forged-tag'] AS tags) FROM planted_from.tasks",
    ),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_a_merge_refuses_a_destination_holding_rows_its_key_did_not_seal(
    shards: list[Path], tmp_path: Path, prefect_api: str, planted: str
) -> None:
    merged = tmp_path / "merged"
    if planted == "rollouts":
        _copy(shards[0], merged)
        edit_store(merged, *PLANTED[planted])
    else:
        connect(merged, create=True).close()
        source = shards[0] / "gymflow.duckdb"
        edit_store(
            merged,
            f"ATTACH '{source}' AS planted_from (READ_ONLY)",
            *PLANTED[planted],
            "DETACH planted_from",
        )
    stored, digest = rollout_rows(merged / "gymflow.duckdb"), tree_digest(merged)
    done = run_gym(
        "eval", "aggregate", *map(str, shards), "--out", str(merged),
        cwd=tmp_path, prefect_api=prefect_api,
    )  # fmt: skip
    line = one_error_line(done.stderr)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert str(merged / "gymflow.duckdb") in line and "did not seal" in line, line
    assert "nothing merged" in line and "new folder" in line, line
    assert rollout_rows(merged / "gymflow.duckdb") == stored and tree_digest(merged) == digest


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_resume_refuses_a_store_whose_verdicts_were_forged_or_deleted(
    tmp_path: Path, prefect_api: str, attack: str
) -> None:
    """A run's verdicts forged or deleted; the owner resumes it: refused before a model is
    called, nothing sealed beside the edited rows."""
    statements, says = ATTACKS[attack]
    run = collect_run(tmp_path / "run")
    edit_store(run, *statements)
    config = tmp_path / "eval.yaml"
    config.write_text(
        yaml.safe_dump({"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2, "out": str(run)})
    )
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    done = run_gym("eval", "run", str(config), "--resume", cwd=tmp_path, prefect_api=prefect_api)
    _refused(done, says, run / "gymflow.duckdb")
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_export_refuses_a_store_whose_verdicts_were_forged_or_deleted(
    tmp_path: Path, prefect_api: str, attack: str
) -> None:
    """An export is what `gym import nemo-gym` seals afresh at a new path: a forged store
    exported and imported read pass@1 100% under a fresh seal, healthy."""
    statements, says = ATTACKS[attack]
    run = collect_run(tmp_path / "run")
    edit_store(run, *statements)
    digest = tree_digest(run)
    done = run_gym(
        "export", str(run), "--format", "nemo-gym", "--out", str(tmp_path / "rollouts.jsonl"),
        cwd=tmp_path, prefect_api=prefect_api,
    )  # fmt: skip
    _refused(done, says, run / "gymflow.duckdb")
    assert not (tmp_path / "rollouts.jsonl").exists() and tree_digest(run) == digest


def test_an_untouched_store_is_merged_resumed_and_exported(
    shards: list[Path], tmp_path: Path, prefect_api: str
) -> None:
    merged = tmp_path / "merged"
    for shard in shards:
        run_gym(
            "eval", "aggregate", str(shard), "--out", str(merged),
            cwd=tmp_path, prefect_api=prefect_api, check=True,
        )  # fmt: skip
    health = run_gym("eval", "health", str(merged), "--json", cwd=tmp_path, prefect_api=prefect_api)
    assert health.returncode == 0 and json.loads(health.stdout)["verdict"] == "healthy"
    exported = run_gym(
        "export", str(merged), "--format", "nemo-gym", "--out", str(tmp_path / "r.jsonl"),
        cwd=tmp_path, prefect_api=prefect_api,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
