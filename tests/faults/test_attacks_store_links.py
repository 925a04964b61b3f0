"""A link put at a sealed store's path to another of the owner's stores (attacker's pass 9, A1).

A store is known by two names when it is reached through a link (its path as named and as it
resolves), and the ledgers list it by both. Its identity was checked against one record among
them, the one with the highest generation: a link from the nightly baseline's store to a weak
experiment whose generation a routine `reverify --set` had raised above the baseline's made the
experiment's record the one compared, and the link read as the run sealed there. On main, with
the simulated policy here (15 tasks): `gym runs gate` on tonight's run went from "FAILED: vs
baseline: -53.3 points" (exit 2) to "passed: +26.7 points" (exit 0), the baseline "healthy",
`reverify --check` clean; no bytes copied, no key.

Now a store must be the one recorded at every name it is reached by (`store_ids.
another_store`): the link is another store at the baseline's path, `seal_rolled_back`. A link
of the owner's own to a run, at a path no writer recorded, still opens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import gym_in_process
from tests.faults.stores import tree_digest
from tests.faults.test_attacks_store_identity import (
    _gate,
    _generation,
    _health,
    _pass1,
    _run,
    owners_runs,
)


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_a_link_to_another_sealed_store_at_the_baselines_path_is_refused(
    tmp_path: Path, linked: str
) -> None:
    weak, n1, n2, weak_pass = owners_runs(tmp_path)
    assert _generation(weak) > _generation(n1)  # above: the link's record outvoted n1's
    stored = tree_digest(weak)

    # the attacker, who writes nightly/: the baseline's store (or folder) becomes a link
    if linked == "file":
        os.replace(n1 / "gymflow.duckdb", n1 / ".aside.duckdb")
        (n1 / "gate.json").unlink(missing_ok=True)
        (n1 / "gymflow.duckdb").symlink_to(weak / "gymflow.duckdb")
    else:
        os.replace(n1, n1.with_name(".n1-aside"))
        n1.symlink_to(weak, target_is_directory=True)

    assert _pass1(n1, tmp_path) == weak_pass  # the experiment's numbers under the baseline's name
    assert _health(n1, tmp_path) == (2, "unhealthy", ["seal_rolled_back"])
    said = " ".join(gym_in_process("eval", "health", str(n1), cwd=tmp_path).stdout.split())
    assert f"{n1 / 'gymflow.duckdb'}: another store put at this path" in said, said
    assert gym_in_process("eval", "reverify", str(n1), "--check", cwd=tmp_path).returncode == 2
    if linked == "file":  # a linked folder is not walked into: the root lost its baseline (A3)
        code, said = _gate(n2, tmp_path)
        assert code == 2 and said.startswith("regression gate FAILED"), said
        assert "passed" not in said.split(":")[0] and "seal_rolled_back" in said, said
    # the experiment itself, at its own path, is untouched and opens
    assert _health(weak, tmp_path) == (0, "healthy", [])
    assert tree_digest(weak) == stored


def test_the_owners_own_link_to_a_run_opens(tmp_path: Path) -> None:
    """A link at a path no writer recorded (`latest` -> a run) is the run it points to."""
    run = _run(tmp_path / "nightly" / "n1", 0.9)
    latest = tmp_path / "latest"
    latest.symlink_to(run, target_is_directory=True)
    assert _health(latest, tmp_path) == (0, "healthy", [])
    assert _pass1(latest, tmp_path) == _pass1(run, tmp_path)


def test_a_copy_or_link_put_into_the_root_is_not_a_night_of_its_trend(tmp_path: Path) -> None:
    """`gym runs trend` reads the root's history as the gate does (attacker's pass 9, A2): on
    main the owner's weak experiment copied (or linked) into the nightly root was drawn as a
    night, 20% among 100% and 47%, with nothing left out; the gate left it out."""
    import json
    import shutil

    weak = _run(tmp_path / "experiments" / "weak", 0.2)
    n1 = _run(tmp_path / "nightly" / "n1", 0.9)
    n2 = _run(tmp_path / "nightly" / "n2", 0.5)
    copied, linked = tmp_path / "nightly" / "n0", tmp_path / "nightly" / "n0-link"
    copied.mkdir()
    shutil.copyfile(weak / "gymflow.duckdb", copied / "gymflow.duckdb")  # the attacker
    linked.mkdir()
    (linked / "gymflow.duckdb").symlink_to(weak / "gymflow.duckdb")
    done = gym_in_process(
        "runs", "trend", "arithmetic-smoke", "--root", str(n1.parent), "--json", cwd=tmp_path
    )
    trend = json.loads(done.stdout)
    assert [run["run_dir"] for run in trend["runs"]] == [str(n1), str(n2)]
    left = {item["run_dir"]: item["why"] for item in trend["left_out"]}
    assert set(left) == {str(copied), str(linked)}, left
    assert all("not sealed at this path" in why for why in left.values()), left
