"""`gym eval profile` and `profile A --compare B` read both stores as they were (issue 42, second
attacker's pass over 2a91e13, §11): a forged B printed a clean difference, exit 0, its seals never
checked. Now profile checks each store's seals as health does (once per store state: an
unchanged file whose every seal matched is not recomputed), gives what they say in its JSON
(`seals`), flags a store whose seals do not match in red, and exits 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import collect_run, edit_store, rollout_rows, tree_digest

#: The failing verdicts set to pass: the seals cannot follow without the key.
FORGED = "UPDATE verifications SET passed = TRUE, reward = 1.0 WHERE NOT passed"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("profile-seals")
    a = collect_run(root / "a", limit=10)
    b = collect_run(root / "b", limit=10, sampling={"seed": 7})
    return {"a": a, "b": b}


def _profile(*args: str, cwd: Path) -> tuple[int, dict, str]:
    done = gym("eval", "profile", *args, "--json", cwd=cwd)
    text = gym("eval", "profile", *args, cwd=cwd)
    assert text.returncode == done.returncode, text.stdout + text.stderr
    return done.returncode, json.loads(done.stdout), text.stdout


def test_profile_and_compare_flag_a_forged_store(runs: dict[str, Path], tmp_path: Path) -> None:
    a, b = runs["a"], tmp_path / "b"
    shutil.copytree(runs["b"], b)
    code, alone, _ = _profile(str(b), cwd=tmp_path)
    assert code == 0 and alone["seals"]["intact"] is True and alone["seals"]["edited"] == []
    code, paired, _ = _profile(str(a), "--compare", str(b), cwd=tmp_path)
    assert code == 0
    assert [paired["profiles"][side]["seals"]["intact"] for side in "ab"] == [True, True]
    # an unchanged file whose seals all matched is not recomputed (the once-per-state record)
    assert _profile(str(b), cwd=tmp_path)[1]["seals"]["checked_at"] is not None

    edit_store(b, FORGED)
    stored, digest = rollout_rows(b / "gymflow.duckdb"), tree_digest(b)
    code, forged, text = _profile(str(b), cwd=tmp_path)
    assert code == 2
    assert forged["pass@1"] == 1.0 > alone["pass@1"]  # what the file says, flagged
    assert forged["seals"]["intact"] is False and forged["seals"]["checked_at"] is None
    assert "verdicts do not match their seal" in forged["seals"]["edited"][0]
    assert "its seals do not match" in text
    code, compared, text = _profile(str(a), "--compare", str(b), cwd=tmp_path)
    assert code == 2
    assert compared["profiles"]["a"]["seals"]["intact"] is True
    assert compared["profiles"]["b"]["seals"]["intact"] is False
    assert compared["difference"] != paired["difference"]
    assert "its seals do not match" in text and "B (" in text
    # reading changed nothing
    assert rollout_rows(b / "gymflow.duckdb") == stored and tree_digest(b) == digest


def test_one_analysis_checks_the_seals_once(runs: dict[str, Path], tmp_path: Path, monkeypatch):
    """`analyse` (the flow's analysis task) checks a store's seals once: health flags what the
    check found and the profile reports the same check, for a forged store as for a sealed one."""
    from gymflow.analysis import run as analysis_run
    from gymflow.store.db import connect

    checks = []
    check = analysis_run.check_seals_once

    def counted(con, *args, **kwargs):
        checks.append(args)
        return check(con, *args, **kwargs)

    monkeypatch.setattr(analysis_run, "check_seals_once", counted)
    monkeypatch.setattr(analysis_run, "_check_seals", analysis_run.memory_capped_call(counted))
    import gymflow.analysis.health as health_module
    import gymflow.analysis.seals as seals_module

    def refused(*args, **kwargs):
        raise AssertionError("the analysis checked the seals a second time")

    monkeypatch.setattr(health_module, "check_seals_once", refused)
    monkeypatch.setattr(seals_module, "check_seals_once", refused)
    b = tmp_path / "b"
    shutil.copytree(runs["b"], b)
    with connect(b, read_only=True) as con:
        sealed = analysis_run.analyse(con)
    assert len(checks) == 1
    assert sealed.profile.seals is not None and sealed.profile.seals.intact is True
    assert sealed.health.checks["seal_mismatch"].count == 0

    edit_store(b, FORGED)
    with connect(b, read_only=True) as con:
        forged = analysis_run.analyse(con)
    assert len(checks) == 2
    mismatched = forged.health.checks["seal_mismatch"]
    assert mismatched.count > 0 and forged.health.verdict == "unhealthy"
    assert forged.profile.seals is not None and forged.profile.seals.intact is False
    edited = forged.profile.seals.edited[0]
    assert f"{mismatched.count} verdicts do not match their seal" in edited
    named = edited.split("(e.g. ")[1].rstrip(")").split(", ")
    assert named == sorted(mismatched.examples)[: len(named)] and 1 <= len(named) <= 3
