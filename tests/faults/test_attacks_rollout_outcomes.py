"""A rollout's identity and outcome, sealed whatever its verdict (issue 42, second attacker's
pass over 2a91e13, a03 and a05). A failing rollout's verdict deleted and the rollout set to
`status='failed', failure_kind='transport'` left every score (a failed rollout needs no
verdict, and no seal covered a rollout without one): pass@1 0.60 -> 0.65, health healthy, gate
pass, `reverify --check` "every verdict matches its seal". Setting the failing rollouts'
`incomplete` and token counts moved diagnose's next action from model training to undecided,
healthy.

Now every rollout's run, task, repeat, status, failure kind, cut, turns, calls and tokens are
sealed (`store/sealed_rows.py`): any such edit, or a rollout added or deleted, is
`rollouts_edited` in health (an integrity failure, exit 2), makes `--check` exit 2, and every
writer refuses the store with nothing written. The writers that change rollouts (a resume's
set-aside, each batch, a merge, an import) seal them again in their own transaction; a store
sealed before the rollouts were reads as before and is sealed whole by its next writer that
seals its inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import gym, gym_in_process
from tests.faults.stores import (
    as_an_older_gymflow_left_it,
    collect_run,
    edit_store,
    one_error_line,
    query,
    rollout_rows,
    tree_digest,
)

#: One failing rollout (of 20: within failed_share's 5%, so nothing but the seal flags it).
FAILING = "SELECT rollout_id FROM verifications WHERE NOT passed ORDER BY rollout_id LIMIT 1"
#: Each edit of rollouts no verdict's seal covers, by name.
EDITS = {
    # a03: a failing verdict dropped from the scores as a transport failure
    "completed to failed": (
        f"CREATE TEMP TABLE victims AS {FAILING}",
        "DELETE FROM verifications WHERE rollout_id IN (SELECT rollout_id FROM victims)",
        "UPDATE rollouts SET status = 'failed', failure_kind = 'transport', "
        "error = 'ConnectError: connection reset' "
        "WHERE rollout_id IN (SELECT rollout_id FROM victims)",
        "UPDATE model_calls SET status = 'error', failure_kind = 'transport' "
        "WHERE rollout_id IN (SELECT rollout_id FROM victims)",
    ),
    # a05: the failing rollouts read as cut at the output-token limit
    "cut at the limit": (
        f"CREATE TEMP TABLE victims AS {FAILING}",
        "UPDATE rollouts SET incomplete = TRUE, output_tokens = 256 "
        "WHERE rollout_id IN (SELECT rollout_id FROM victims)",
        "UPDATE model_calls SET output_tokens = 256 "
        "WHERE rollout_id IN (SELECT rollout_id FROM victims)",
    ),
    # third attacker's pass, a01: the failing rollouts claim the harness's turn limit, which
    # moved the next action from model training to harness work; and their latency rewritten
    "turn limit claimed": (
        f"CREATE TEMP TABLE victims AS {FAILING}",
        "UPDATE rollouts SET counters_json = '{\"max_turns_reached\": 1}', latency_s = 0.001 "
        "WHERE rollout_id IN (SELECT rollout_id FROM victims)",
    ),
    # a failing rollout with its verdict and calls deleted: it reads as never run
    "rollout deleted": (
        f"CREATE TEMP TABLE victims AS {FAILING}",
        "DELETE FROM verifications WHERE rollout_id IN (SELECT rollout_id FROM victims)",
        "DELETE FROM model_calls WHERE rollout_id IN (SELECT rollout_id FROM victims)",
        "DELETE FROM rollouts WHERE rollout_id IN (SELECT rollout_id FROM victims)",
    ),
}


def _numbers(run: Path, cwd: Path) -> dict:
    """Every number profile reports, and health's exit code, verdict and gate failures."""
    read = gym_in_process("eval", "profile", str(run), "--json", cwd=cwd)
    profile = json.loads(read.stdout)
    # an edited store's numbers are printed, flagged by its seals, and profile exits 2
    assert read.returncode == (2 if profile["seals"]["intact"] is False else 0), read.stderr
    done = gym_in_process("eval", "health", str(run), "--json", "--verify-seals", cwd=cwd)
    health = json.loads(done.stdout)
    return {
        "profile": {k: v for k, v in profile.items() if isinstance(v, int | float)},
        "health": (done.returncode, health["verdict"], sorted(health["gate_failures"])),
    }


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("outcomes") / "run", limit=10)


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_rollout_outcome_reads_as_tampered(
    honest: Path, tmp_path: Path, edit: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    before = _numbers(run, tmp_path)
    assert before["health"] == (0, "healthy", [])
    edit_store(run, *EDITS[edit])
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    # the numbers read what the file now says; health says they cannot be trusted
    code, verdict, failures = after["health"]
    assert (code, verdict) == (2, "unhealthy") and "rollouts_edited" in failures, after
    if edit != "rollout deleted":  # a deleted one is missing too; the others only the seals see
        # the edits that touch the rollout's model calls too fail their seal (sealed_rows.py)
        calls = any("model_calls" in sql for sql in EDITS[edit])
        # and those that delete its verdict, the verdict set's (sealed_rows.VERDICTS)
        gone = any("DELETE FROM verifications" in sql for sql in EDITS[edit])
        expected = ["calls_edited"] if calls else []
        expected += ["rollouts_edited"] + (["verdicts_edited"] if gone else [])
        assert failures == expected, after
    if edit not in ("cut at the limit", "turn limit claimed"):
        assert after["profile"]["pass@1"] != before["profile"]["pass@1"], (before, after)
    checked = gym_in_process("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "rollouts do not match their seal" in checked.stdout, checked.stdout
    # every writer refuses to build on it: a new version, a verifier version made current
    for command in (
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
        ("eval", "reverify", str(run), "--failed-only"),
    ):
        done = gym_in_process(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "rollouts' runs, tasks, repeats, statuses" in one_error_line(done.stderr)
    assert rollout_rows(run / "gymflow.duckdb") == stored
    assert tree_digest(run) == digest


def test_a_store_sealed_before_its_rollouts_opens_and_its_next_writer_seals_them(
    honest: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    before = _numbers(run, tmp_path)
    as_an_older_gymflow_left_it(run, 2)
    assert _numbers(run, tmp_path) == before  # read as before: nothing to check it against
    gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    assert query(run / "gymflow.duckdb", "SELECT count(*) FROM meta WHERE key = 'rollouts_seal'")
    assert query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'rollouts_seal'")[0][
        0
    ].startswith("20:")
    assert _numbers(run, tmp_path)["health"] == (0, "healthy", [])
    edit_store(run, *EDITS["completed to failed"])
    assert _numbers(run, tmp_path)["health"] == (
        2,
        "unhealthy",
        ["calls_edited", "rollouts_edited", "verdicts_edited"],
    )


def test_an_older_seal_record_put_back_does_not_switch_the_rollouts_check_off(
    honest: Path, tmp_path: Path
) -> None:
    """A version 2 record is the same in every store of one key with as many verdicts from
    before the seal (none): one taken from an older store, put in place of this one's, with the
    rollouts' seal deleted, read as a store sealed before its rollouts were, and the a03 edit
    went unseen. Where this machine sealed the rollouts (its sealed-stores ledger), an older
    record is an edit: health fails and writers refuse, nothing written."""
    from gymflow.store.seal import RECORD_VERSION
    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_stores import remember

    run = tmp_path / "run"
    shutil.copytree(honest, run)
    key = load_key(create=False)
    assert key is not None
    # as the owner's gymflow sealed it here
    remember(run / "gymflow.duckdb", key, version=RECORD_VERSION)
    before = _numbers(run, tmp_path)
    _record_put_back(run)
    edit_store(run, *EDITS["completed to failed"])
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["profile"]["pass@1"] != before["profile"]["pass@1"]
    assert after["health"] == (
        2,
        "unhealthy",
        ["calls_edited", "rollouts_edited", "task_list_edited", "verdicts_edited"],
    ), after
    done = gym_in_process("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path)
    assert done.returncode == 2 and "nothing was written" in one_error_line(done.stderr)
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def _record_put_back(run: Path) -> None:
    """What an attacker holding an older store of this key does: its version 2 record (the
    same in every store of the key with no verdict from before the seal) put in place of this
    store's own, and the rollouts' and model calls' seals deleted. The task list's seal, which
    needs the key, stays as this store's writers left it."""
    from gymflow.store.seal import _record
    from gymflow.store.seal_key import load_key

    key = load_key(create=False)
    assert key is not None
    edit_store(
        run,
        "DELETE FROM meta WHERE key IN ('rollouts_seal', 'calls_seal')",
        f"UPDATE meta SET value = '{_record(key, 0, version=2)}' WHERE key = 'seal'",
    )


def test_an_older_record_put_back_in_a_moved_store_is_an_edit(honest: Path, tmp_path: Path) -> None:
    """Third attacker's pass, a06: the same downgrade in a store its owner moved (so this
    machine's ledger holds no line for its path), then the a03 edit. It read healthy, and the
    owner's next routine reverify sealed the edit (pass@1 0.60 -> 0.65). From seal record
    version 3 the task list is sealed under a label naming the version: under the older record
    it no longer matches, so health fails (`task_list_edited`) and every writer refuses,
    nothing written."""
    run = tmp_path / "moved"
    shutil.copytree(honest, run)  # a path this machine never sealed: no ledger line
    before = _numbers(run, tmp_path)
    _record_put_back(run)
    edit_store(run, *EDITS["completed to failed"])
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["profile"]["pass@1"] != before["profile"]["pass@1"]
    assert after["health"] == (2, "unhealthy", ["task_list_edited", "verdicts_edited"]), after
    for command in (
        ("eval", "reverify", str(run), "--set", "abs_tol=0.5"),
        ("eval", "reverify", str(run), "--check"),
    ):
        done = gym_in_process(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
    assert "the run's task list does not match its seal" in done.stdout, done.stdout
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


@pytest.mark.parametrize(
    "meta_key", ["seal", "rollouts_seal", "calls_seal", "inputs_seal", "task_seal"]
)
def test_a_seal_text_with_a_character_outside_ascii_is_an_edit_not_a_crash(
    honest: Path, tmp_path: Path, meta_key: str
) -> None:
    """Third attacker's pass, a08: 'é' written into a seal record crashed every read command
    and every writer (`hmac.compare_digest` refuses such text: exit 3, "a gymflow bug"). It is
    now a seal that does not match: health exits 2, no traceback. (The record itself garbled
    names no key: every seal it stood for is then checked with this machine's key, and all
    match, so the store reads as it is.)"""
    run = tmp_path / "run"
    shutil.copytree(honest, run)
    edit_store(run, f"UPDATE meta SET value = 'é' WHERE key = '{meta_key}'")
    for command in (("eval", "health", str(run)), ("eval", "profile", str(run))):
        done = gym_in_process(*command, cwd=tmp_path)
        assert "Traceback" not in done.stderr and "gymflow bug" not in done.stderr, done.stderr
        assert done.returncode == (0 if meta_key == "seal" else 2), done.stdout + done.stderr
