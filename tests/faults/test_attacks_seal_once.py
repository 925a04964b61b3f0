"""The seal checked once per store state (issue 42): recomputing every seal was 19 of health's
36 s at ten million rollouts. After a full check passes, the state of the file DuckDB opened
(device, inode, size, mtime and ctime in ns) and the SHA-256 of its bytes are recorded beside
the key, owner-only and MAC'd; a later read of the same file, state and bytes skips the
recompute and says when it was checked. Any edit moves the state or the bytes (a process cannot
set ctime back; a write through a shared map moves the bytes: test_attacks_seal_shortcut.py), a
record not MAC'd by the key is not taken, and `--verify-seals`, `reverify --check` and the
regression gate always recompute."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gymflow.store.checked_stores import Checked, file_digest, file_state, record_file
from gymflow.store.seal_key import load_key
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.forged_statistics import forge_bounds
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    rollout_rows,
    seal_health,
    tree_digest,
)

PASSED = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)",
    "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run every test here checks a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


def _health(run: Path, cwd: Path, *extra: str) -> dict:
    return seal_health(run, cwd, *extra, gym_command=gym)


def test_an_unchanged_store_is_checked_once_and_says_when(honest: Path, tmp_path: Path) -> None:
    run = copied_run(honest, tmp_path / "run")
    first = _health(run, tmp_path)
    assert first == {"code": 0, "verdict": "healthy", "mismatch": 0, "checked_at": None}
    assert stat.S_IMODE(record_file().stat().st_mode) == 0o600
    profile = gym("eval", "profile", str(run), "--json", cwd=tmp_path, check=True).stdout
    again = _health(run, tmp_path)
    assert again["checked_at"] is not None and again["verdict"] == "healthy"
    shown = gym("eval", "health", str(run), cwd=tmp_path, check=True).stdout
    assert "every one matched at" in " ".join(shown.split())
    full = _health(run, tmp_path, "--verify-seals")
    assert full["checked_at"] is None and full["verdict"] == "healthy"
    # the same numbers; its seals were recomputed by the full check since (`checked_at`)
    again_profile = json.loads(gym("eval", "profile", str(run), "--json", cwd=tmp_path).stdout)
    first_profile = json.loads(profile)
    assert first_profile.pop("seals")["intact"] is again_profile.pop("seals")["intact"] is True
    assert again_profile == first_profile


def test_an_edit_after_the_check_is_checked_in_full_even_with_mtime_set_back(
    honest: Path,
    tmp_path: Path,
) -> None:
    """The attack the record invites: edit the checked store, then set its modification time
    back. The change time moved anyway, so the state differs and every seal is recomputed."""
    run = copied_run(honest, tmp_path / "run")
    assert _health(run, tmp_path)["checked_at"] is None
    store = run / "gymflow.duckdb"
    before = os.stat(store)
    edit_store(run, *PASSED)
    os.utime(store, ns=(before.st_atime_ns, before.st_mtime_ns))
    wal = Path(f"{store}.wal")
    assert not wal.exists()
    after = _health(run, tmp_path)
    assert after["checked_at"] is None and after["mismatch"] > 0
    assert (after["code"], after["verdict"]) == (2, "unhealthy")


def test_a_record_not_made_with_the_key_is_not_taken(honest: Path, tmp_path: Path) -> None:
    """Whoever can write the record file (not the key) writes one for the edited store's
    state: its MAC does not verify, the seals are recomputed."""
    run = copied_run(honest, tmp_path / "run")
    edit_store(run, *PASSED)
    path = os.path.realpath(run / "gymflow.duckdb")
    entry = {
        "path": path,
        "state": file_state(path),
        "content": file_digest(path),
        "checked_at": 1.0,
        "mac": "0" * 64,
    }
    record_file().parent.mkdir(parents=True, exist_ok=True)
    record_file().write_text(json.dumps(entry) + "\n")
    record_file().chmod(0o600)
    found = _health(run, tmp_path)
    assert found["checked_at"] is None and found["verdict"] == "unhealthy"


def test_reverify_check_and_verify_seals_always_recompute(honest: Path, tmp_path: Path) -> None:
    """A record that vouches for an edited state (made here with the key, as a stale record
    would be) is taken by health, by design; `--verify-seals` and `reverify --check` ignore it
    and find every rewritten verdict. Nothing stored changes."""
    run = copied_run(honest, tmp_path / "run")
    edit_store(run, *PASSED)
    key = load_key(create=False)
    assert key is not None
    path = os.path.realpath(run / "gymflow.duckdb")
    vouched = Checked(path, str(file_state(path)), file_digest(path), 1.0)
    entry = {
        "path": path,
        "state": vouched.state,
        "content": vouched.content,
        "checked_at": 1.0,
        "mac": vouched.mac(key),
    }
    record_file().write_text(json.dumps(entry) + "\n")
    record_file().chmod(0o600)  # gymflow's own mode: without it the order of tests decides
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    assert _health(run, tmp_path)["checked_at"] is not None
    full = _health(run, tmp_path, "--verify-seals")
    assert full["mismatch"] > 0 and full["code"] == 2
    checked = gym("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path)
    assert checked.returncode == 2 and json.loads(checked.stdout)["seal_mismatches"] > 0
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def test_a_reverify_of_a_checked_store_is_checked_by_its_next_read(
    honest: Path, tmp_path: Path
) -> None:
    """Checked before it wrote, the reverify still does not vouch for the file it leaves
    (tests/faults/test_attacks_writers_records.py): the next health recomputes, and records."""
    run = copied_run(honest, tmp_path / "run")
    assert _health(run, tmp_path)["verdict"] == "healthy"
    assert _health(run, tmp_path)["checked_at"] is not None
    gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    after = _health(run, tmp_path)
    assert after["checked_at"] is None and after["verdict"] == "healthy"
    assert _health(run, tmp_path)["checked_at"] is not None
    full = _health(run, tmp_path, "--verify-seals")
    assert full["verdict"] == "healthy" and full["mismatch"] == 0


def test_a_record_an_earlier_check_made_is_not_taken(honest: Path, tmp_path: Path) -> None:
    """A record says the file passed the full check of the gymflow that wrote it, which checked
    less: a store whose column statistics were forged, read once by a gymflow before that check
    existed, was then read by this one with no check at all and scored 0 of 12 (attacker's
    pass over 6a8be2e). A record of an earlier check's version, MAC'd with the key, is not
    taken: the file is checked in full, and refused."""
    run = copied_run(honest, tmp_path / "run")
    store = run / "gymflow.duckdb"
    assert forge_bounds(store, ("ok", "ok"), ("zz", "zz"), "both") == 2
    key = load_key(create=False)
    assert key is not None
    path = os.path.realpath(store)
    state, content = str(file_state(path)), file_digest(path)
    earlier = key.mac(f"gymflow checked store v2\n{path}\n{state}\n{content}\n{1.0!r}")
    entry = {"path": path, "state": state, "content": content, "checked_at": 1.0, "mac": earlier}
    record_file().parent.mkdir(parents=True, exist_ok=True)
    record_file().write_text(json.dumps(entry) + "\n")
    record_file().chmod(0o600)
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    assert done.returncode == 1 and "verifications.status" in done.stderr, done.stderr


def test_a_writer_takes_the_statistics_check_from_the_record_alone(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before it writes, a writer recomputes every seal; the column statistics' check it takes
    from a record of the same bytes passing the full check (they are those bytes, at this
    path or a copy's), and makes on any other file."""
    from gymflow.store import seal
    from gymflow.store.checked_stores import check_seals_once
    from gymflow.store.db import connect
    from gymflow.store.sealed_first import check_before_writing

    recorded, copy = copied_run(honest, tmp_path / "a"), copied_run(honest, tmp_path / "b")
    other = collect_run(tmp_path / "c", limit=5)  # other bytes
    con = connect(recorded, read_only=True)
    try:
        assert check_seals_once(con).passed
    finally:
        con.close()
    checked: list[str] = []
    monkeypatch.setattr(seal, "check_statistics", lambda _con, where: checked.append(where))
    for run in (recorded, copy, other):
        con = connect(run)
        try:
            assert check_before_writing(con, str(run))
        finally:
            con.close()
    assert checked == [os.path.realpath(other / "gymflow.duckdb")]


def test_a_copy_of_a_checked_store_has_its_seals_checked_not_its_statistics(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of a copy of a checked store recomputes its seals (its path has no record) but
    takes the statistics' check from the record of the same bytes; `--verify-seals` makes
    both, and a copy edited after is checked in full."""
    from gymflow.store import seal

    checked = copied_run(honest, tmp_path / "a")
    assert _health(checked, tmp_path)["verdict"] == "healthy"
    copy, edited = copied_run(checked, tmp_path / "b"), copied_run(checked, tmp_path / "c")
    forge_bounds(edited / "gymflow.duckdb", ("ok", "ok"), ("zz", "zz"), "both")
    read: list[str] = []
    real = seal.check_statistics
    monkeypatch.setattr(
        seal, "check_statistics", lambda con, where: (read.append(where), real(con, where))
    )
    found = _health(copy, tmp_path)
    assert found == {"code": 0, "verdict": "healthy", "mismatch": 0, "checked_at": None}
    assert read == []
    assert _health(copy, tmp_path, "--verify-seals")["verdict"] == "healthy"
    assert read == [os.path.realpath(copy / "gymflow.duckdb")]
    done = gym("eval", "profile", str(edited), "--json", cwd=tmp_path)
    assert done.returncode == 1 and "verifications.status" in done.stderr, done.stderr
