"""The regression gate's baseline pinned by its store's identity (issue 42, the s09 follow-up).

Unpinned, `gym runs gate` compares with the earliest run under the root that this machine
sealed there. On main, whoever can write the root deletes that run: the next earliest, a weak
night, silently becomes the baseline, and tonight's 45-point drop from the baseline
("regression gate FAILED: vs baseline: -45.0 points", exit 2) reads "regression gate passed:
vs baseline: +5.0 points", exit 0. `--baseline PATH` pins a path: the owner's gymflow writing
another run into that folder (a new history, recorded there, healthy) made it the baseline
without a word.

Now `gym runs pin RUN` records the store (root, run folder, store id, generation, when) beside
the seal key, owner-only, under the key's MAC; every later gate under the root compares with
that store only. Missing, moved or another store at its path: FAILED (exit 2) in one line
naming the record, the path and both ids, with nothing compared. A record edited, forged
without the key, copied from another root or opened to others is refused the same way."""

from __future__ import annotations

import hmac
import json
import os
import shutil
from pathlib import Path

from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import query, tree_digest
from tests.history.runs import dated_run


def _nights(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The root's first night (80%, the baseline), a weak night (30%) and tonight (35%)."""
    root = tmp_path / "nightly"
    first = dated_run(root / "night-01", "night-01", passing=16, day=1)
    weak = dated_run(root / "night-02", "night-02", passing=6, day=2)
    tonight = dated_run(root / "night-03", "night-03", passing=7, day=3)
    return first, weak, tonight


def _gate(run: Path, cwd: Path, *args: str) -> tuple[int, dict, list[str]]:
    """The gate as typed: exit code, its JSON, and its text's lines."""
    as_json = gym("runs", "gate", str(run), "--json", *args, cwd=cwd)
    said = gym("runs", "gate", str(run), *args, cwd=cwd)
    assert said.returncode == as_json.returncode, said.stdout + said.stderr
    return as_json.returncode, json.loads(as_json.stdout), said.stdout.splitlines()


def _pin(run: Path, cwd: Path) -> tuple[str, Path]:
    """`gym runs pin RUN`: the store id pinned, and the pin's record."""
    done = gym("runs", "pin", str(run), "--json", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    said = json.loads(done.stdout)
    return said["pinned"]["store_id"], Path(said["record"])


def _store_id(run: Path) -> str:
    return query(run / "gymflow.duckdb", "SELECT value FROM meta WHERE key = 'store_id'")[0][0]


def _refused(code: int, verdict: dict, lines: list[str], *named: str) -> str:
    """A gate that failed on its pin: nothing compared, one line naming each of `named`."""
    assert code == 2 and not verdict["passed"] and verdict["checks"] == [], lines
    assert verdict["baseline"]["pinned"] and verdict["baseline"]["refused"]
    (first, *_) = lines
    assert first.startswith("regression gate FAILED: "), first
    for name in named:
        assert name in first, (name, first)
    return first


def test_the_pinned_baseline_deleted_fails_the_gate_naming_it(tmp_path: Path) -> None:
    first, weak, tonight = _nights(tmp_path)
    code, verdict, lines = _gate(tonight, tmp_path)
    assert code == 2 and verdict["checks"][0]["run_dir"] == str(first), lines
    pinned, record = _pin(first, tmp_path)
    assert pinned == _store_id(first)
    code, verdict, lines = _gate(tonight, tmp_path)
    assert code == 2 and lines[0].startswith("regression gate FAILED: vs baseline: -45.0 points")
    assert lines[1].startswith(f"baseline: {first}, pinned (store id {pinned}"), lines

    shutil.rmtree(first)  # the attacker: whoever can write the root
    code, verdict, lines = _gate(tonight, tmp_path)
    # on main (no pin): exit 0, "regression gate passed: vs baseline: +5.0 points" (night-02)
    said = _refused(code, verdict, lines, str(record), str(first), pinned, "found none")
    assert "no store there (deleted or moved)" in said and str(weak) not in said
    # gate.json says so, and the report states it
    assert (
        json.loads((tonight / "gate.json").read_text())["baseline"]["refused"]
        == (verdict["baseline"]["refused"])
    )
    assert gym("report", str(tonight), cwd=tmp_path).returncode == 0
    page = (tonight / "report.html").read_text()
    assert 'data-field="regression.baseline" data-value="refused"' in page
    assert "Regression gate FAILED" in page and pinned in page

    # moved rather than deleted: the same
    shutil.copytree(weak, tmp_path / "kept")
    shutil.move(weak, first)
    code, verdict, lines = _gate(tonight, tmp_path)
    _refused(code, verdict, lines, str(record), str(first), pinned, f"found {_store_id(first)}")


def test_another_sealed_store_copied_onto_the_pinned_path_fails_the_gate(tmp_path: Path) -> None:
    experiment = dated_run(tmp_path / "dev" / "weak", "weak", passing=2, day=0)
    first, _, tonight = _nights(tmp_path)
    pinned, record = _pin(first, tmp_path)
    shutil.copyfile(experiment / "gymflow.duckdb", first / "gymflow.duckdb")  # one `cp`
    stored = tree_digest(first)
    code, verdict, lines = _gate(tonight, tmp_path)
    said = _refused(code, verdict, lines, str(record), str(first), pinned, _store_id(experiment))
    assert "another store" in said and "passed" not in said
    assert tree_digest(first) == stored


def test_another_run_written_at_the_pinned_path_is_not_the_baseline(tmp_path: Path) -> None:
    """A path holds whichever store gymflow last wrote there: on main, `--baseline` named a
    path, and a new run written into the baseline's folder (healthy: its own history, recorded
    there) was compared with, the drop hidden."""
    first, _, tonight = _nights(tmp_path)
    pinned, record = _pin(first, tmp_path)
    shutil.rmtree(first)
    dated_run(first, "rerun", passing=7, day=0.5)  # this machine's gymflow, a new history
    assert gym("eval", "health", str(first), "--verify-seals", cwd=tmp_path).returncode == 0
    code, verdict, lines = _gate(tonight, tmp_path, "--baseline", str(first))
    _refused(code, verdict, lines, str(record), str(first), pinned, f"found {_store_id(first)}")


def test_a_pin_record_edited_or_forged_is_refused(tmp_path: Path) -> None:
    experiment = dated_run(tmp_path / "dev" / "weak", "weak", passing=2, day=0)
    first, _, tonight = _nights(tmp_path)
    _, record = _pin(first, tmp_path)
    honest = json.loads(record.read_text())

    def gated_with(document: dict) -> str:
        record.write_text(json.dumps(document))
        code, verdict, lines = _gate(tonight, tmp_path)
        return _refused(code, verdict, lines, str(record), "refused")

    # pointed at the weak experiment, with its id, the MAC kept: the MAC does not hold
    edited = {**honest, "baseline": str(experiment), "store_id": _store_id(experiment)}
    assert "MAC does not hold" in gated_with(edited)
    # a MAC made with a key of the forger's own
    body = {k: v for k, v in edited.items() if k != "mac"}
    forged = hmac.new(os.urandom(32), json.dumps(body).encode(), "sha256").hexdigest()
    assert "MAC does not hold" in gated_with({**edited, "mac": forged})
    # made with another key than this machine's
    assert "another seal key" in gated_with({**honest, "key_id": "0" * 16})
    # the honest record of another root, copied over this root's
    other = tmp_path / "other-root"
    dated_run(other / "night-01", "other", passing=2, day=0)
    _, elsewhere = _pin(other / "night-01", tmp_path)
    assert "the record of another root" in gated_with(json.loads(elsewhere.read_text()))
    # not gymflow's, or readable by others
    assert "not a pin record gymflow wrote" in gated_with({"baseline": str(experiment)})
    record.write_text(json.dumps(honest))
    record.chmod(0o644)
    code, verdict, lines = _gate(tonight, tmp_path)
    assert "not owner-only" in _refused(code, verdict, lines, str(record))
    # the owner's way out: remove it (the gate is unpinned again, and says so)
    removed = gym("runs", "pin", "--root", str(first.parent), "--remove", cwd=tmp_path)
    assert removed.returncode == 0 and str(record) in removed.stdout
    code, verdict, lines = _gate(tonight, tmp_path)
    assert code == 2 and verdict["baseline"]["pinned"] is False, lines
