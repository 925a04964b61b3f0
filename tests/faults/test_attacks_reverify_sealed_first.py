"""A routine reverify never seals what was edited (issue 42, attacker's pass over 84b21e2).

- The failing rollouts' outputs rewritten to the reference and their verdicts deleted: health
  said `verification_missing`, and the owner's plain `gym eval reverify RUN` judged the edited
  outputs and sealed them (pass@1 59% -> 100%, healthy, `--check` clean). With the verdicts
  forged instead of deleted, reverify printed pass@1 100% before health found the mismatch.
- Time of check and time of use: reverify asked "was this store checked?" (a stat) before it
  waited for the write lock, then recorded the state after its write as checked; an attacker
  holding the lock edited in between, and health took the forged store as checked.

Now reverify recomputes every seal on its own connection, under the lock, before it writes:
a mismatch or a deleted verdict is refused (exit 2, one line, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import duckdb

from tests.conftest import GYM
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import collect_run, edit_store, one_error_line, rollout_rows, tree_digest

FORGED_OUTPUTS = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)"
)
FORGED_VERDICTS = "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed"


def _pass_at_1(run: Path, cwd: Path) -> float:
    profiled = gym("eval", "profile", str(run), "--json", cwd=cwd, check=True).stdout
    return json.loads(profiled)["pass@1"]


def _refused(run: Path, cwd: Path, *extra: str) -> str:
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    done = gym("eval", "reverify", str(run), *extra, cwd=cwd)
    line = one_error_line(done.stderr)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "nothing was written" in line and "--verify-seals" in line, line
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest
    return line


def test_outputs_forged_and_verdicts_deleted_are_refused_not_sealed(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run")
    before = _pass_at_1(run, tmp_path)
    assert before < 1.0
    edit_store(run, FORGED_OUTPUTS, "DELETE FROM verifications")
    line = _refused(run, tmp_path)
    assert "have no verdict" in line and "verdicts were deleted" in line, line
    _refused(run, tmp_path, "--make-current")
    health = gym("eval", "health", str(run), "--verify-seals", cwd=tmp_path)
    assert health.returncode == 2


def test_only_the_failing_verdicts_deleted_are_refused(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run")
    edit_store(
        run,
        FORGED_OUTPUTS,
        "DELETE FROM verifications WHERE rollout_id IN "
        "(SELECT rollout_id FROM rollouts WHERE output_text LIKE 'Answer: %')",
    )
    assert "have no verdict" in _refused(run, tmp_path, "--set", "abs_tol=0.000001")


def test_outputs_and_verdicts_forged_are_refused_before_judging(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run")
    edit_store(run, FORGED_OUTPUTS, FORGED_VERDICTS)
    assert "do not match their seal" in _refused(run, tmp_path)


def test_an_untouched_store_is_still_reverified_and_checked_by_its_next_read(
    tmp_path: Path,
) -> None:
    """The reverify does not record the file it wrote as checked (another process may have
    written it meanwhile: tests/faults/test_attacks_writers_records.py); the next read checks
    it in full and records it, and the read after that takes the record."""
    run = collect_run(tmp_path / "run")
    done = gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "written"
    reads = [
        json.loads(gym("eval", "health", str(run), "--json", cwd=tmp_path).stdout) for _ in range(2)
    ]
    assert [health["verdict"] for health in reads] == ["healthy", "healthy"]
    assert reads[0]["seals_checked_at"] is None and reads[1]["seals_checked_at"] is not None


def _waiting_for_the_lock(pid: int) -> bool:
    """Whether process `pid` sleeps between tries for the store's lock (`db._open`'s backoff:
    the only sleep before a reverify writes), i.e. is past anything it did before opening."""
    try:
        return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def test_an_edit_made_while_reverify_waits_for_the_lock_is_refused(tmp_path: Path) -> None:
    """The attacker holds the write lock while the owner's reverify starts, forges once the
    reverify waits for the lock, then lets go: the reverify checks the
    store it got the lock on, refuses it, and records nothing as checked."""
    run = collect_run(tmp_path / "run")
    store = run / "gymflow.duckdb"
    assert json.loads(gym("eval", "health", str(run), "--json", cwd=tmp_path).stdout)[
        "verdict"
    ] == ("healthy")
    held = duckdb.connect(str(store))
    owner = subprocess.Popen(
        [GYM, "eval", "reverify", str(run), "--set", "abs_tol=0.000001"],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _waiting_for_the_lock(owner.pid):
            assert owner.poll() is None and time.monotonic() < deadline, owner.communicate()
            time.sleep(0.005)
        held.execute(FORGED_OUTPUTS)
        held.execute(FORGED_VERDICTS)
    finally:
        held.close()
    out, err = owner.communicate(timeout=120)
    line = one_error_line(err)
    assert owner.returncode == 2 and "do not match their seal" in line, (out, err)
    health = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    report = json.loads(health.stdout)
    assert health.returncode == 2 and report["seals_checked_at"] is None
    assert report["checks"]["seal_mismatch"]["count"] > 0


def test_seal_record_and_every_verdict_deleted_at_the_sealed_path_is_refused(
    tmp_path: Path,
) -> None:
    """No verdict left reads as a store never sealed, which the writer's `claim` seals afresh;
    at a path this machine sealed, with rollouts stored, it is the seals stripped."""
    run = collect_run(tmp_path / "run")
    edit_store(
        run, FORGED_OUTPUTS, "DELETE FROM verifications", "DELETE FROM meta WHERE key = 'seal'"
    )
    assert "this machine sealed this store" in _refused(run, tmp_path)
