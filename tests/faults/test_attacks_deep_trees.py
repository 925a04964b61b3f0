"""Trees made by someone else, walked and removed without recursion (attack pass 8, F5, F6, F7).
An agent's six lines of Python left 1,100 nested folders in /logs/verifier: the sandbox's clean-up
(`shutil.rmtree`, recursive on Python 3.11) raised RecursionError out of the rollout's `finally`,
`gym eval run` ended in exit 3 with nothing stored, and the sandbox's folders stayed in /tmp. The
same folder under a reports root made `gym serve reports`'s index answer 500. And one store an
earlier gymflow sealed under a root stopped `gym runs trend` for every run there."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gymflow.core.trees import remove_tree, walk
from gymflow.environments.workspace.environment import WorkspaceEnvironment
from gymflow.reports.serving import reports_app
from gymflow.sandboxes import taken_out
from tests.conftest import gym_in_process as gym
from tests.faults.stores import collect_run
from tests.faults.test_attacks_sandbox_out import fix_median  # noqa: F401 (a fixture)
from tests.workspace.test_agent_outcomes import _own, _rollout

#: Deeper than Python's recursion limit (1,000), as the attacker's folder was.
DEPTH = 1_500
#: The agent's command: DEPTH folders in /logs/verifier and in /logs/agent.
DEEP_FOLDERS = (
    "python3 -c 'import os\n"
    'for top in ("/logs/verifier", "/logs/agent"):\n'
    "    os.makedirs(top, exist_ok=True); os.chdir(top)\n"
    f'    for _ in range({DEPTH}): os.mkdir("a"); os.chdir("a")\''
)


@pytest.fixture(autouse=True)
def _trees_removed(tmp_path: Path):
    """pytest's own clean-up of its temporary folders recurses too."""
    yield
    for made in tmp_path.iterdir():
        remove_tree(made)


def _deep(root: Path, depth: int) -> None:
    """`depth` nested folders `a` under `root`, made relative to an open folder: their full
    paths pass PATH_MAX, as the agent's did."""
    root.mkdir()
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(depth):
        os.mkdir("a", dir_fd=folder)
        if level % 500 == 0:
            os.symlink(root.parent / "outside", "link", dir_fd=folder)
        inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
        os.close(folder)
        folder = inner
    os.close(folder)


def test_a_tree_past_the_recursion_limit_is_walked_and_removed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("the host's")
    tree = tmp_path / "tree"
    _deep(tree, DEPTH)
    seen = list(walk(tree, max_depth=10))
    assert len(seen) == 11  # the root and ten levels entered, the eleventh listed only
    assert seen[-1][1] == ["a"] and "link" in seen[0][2]
    assert all(os.path.realpath(folder).startswith(str(tree)) for folder, _, _ in seen)
    remove_tree(tree)
    assert not tree.exists()
    assert (outside / "kept").read_text() == "the host's"  # a link is removed, not followed
    remove_tree(tree)  # nothing there: no error


def test_a_download_of_a_deep_tree_takes_out_what_is_within_its_bounds(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    _deep(tmp_path / "logs", DEPTH)
    left = taken_out.copy_out(tmp_path / "logs", tmp_path / "out")
    shown = "logs" + "/a" * taken_out.MAX_DEPTH
    assert f"{shown}: past {taken_out.MAX_DEPTH} folders deep; left in the sandbox" in left
    assert len(list(walk(tmp_path / "out", max_depth=DEPTH))) == taken_out.MAX_DEPTH


def test_an_agent_that_leaves_a_deep_tree_is_judged_and_cleaned_up(
    fix_median: WorkspaceEnvironment,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attack through one rollout of the command harness in bubblewrap: the agent's work
    is judged by the task's tests (it fixed nothing: reward 0), and its sandbox is gone. On
    main the rollout's clean-up raised RecursionError."""
    scratch = Path(tempfile.mkdtemp(prefix="gf-"))  # short: the model socket's path lies in it
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    try:
        episode, verdict = _rollout(fix_median, _own(DEEP_FOLDERS))
        assert episode.failure_kind is None, episode.error
        assert (verdict.status, verdict.reward, verdict.passed) == ("ok", 0.0, False)
        assert list(scratch.iterdir()) == []
    finally:
        remove_tree(scratch)


def test_the_report_index_lists_reports_beside_a_deep_tree(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    root = tmp_path / "runs"
    (root / "nightly").mkdir(parents=True)
    (root / "nightly" / "report.html").write_text("<!doctype html><title>the report</title>")
    _deep(root / "deep", DEPTH)
    answer = TestClient(reports_app(root, hosts=None)).get("/")
    assert answer.status_code == 200
    assert "nightly/report.html" in answer.text


def test_a_store_an_earlier_gymflow_sealed_is_skipped_by_the_trend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One store under the root, sealed by this key under seal record 5 (the fixture of
    test_attacks_seal_counts.py): the trend draws the other run and names the one to migrate."""
    from tests.faults.test_attacks_seal_counts import FIXTURE, FIXTURE_KEY

    root = tmp_path / "runs"
    (root / "old").mkdir(parents=True)
    with gzip.open(FIXTURE / "gymflow.duckdb.gz") as packed:
        (root / "old" / "gymflow.duckdb").write_bytes(packed.read())
    for variable, value in FIXTURE_KEY.items():
        monkeypatch.setenv(variable, value)
    collect_run(root / "new", benchmark="arithmetic-smoke", limit=5, repeats=1)
    trend = gym("runs", "trend", "arithmetic-smoke", "--root", str(root), "--json", cwd=tmp_path)
    assert trend.returncode == 0, trend.stdout + trend.stderr
    drawn = json.loads(trend.stdout)
    assert [Path(run["run_dir"]).name for run in drawn["runs"]] == ["new"]
    ((skipped),) = drawn["skipped"]
    assert Path(skipped["run_dir"]).name == "old"
    assert "sealed by an earlier gymflow" in skipped["why"]
    assert f"gym eval migrate {root / 'old'}" in skipped["why"]
