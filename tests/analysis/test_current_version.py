"""A reverify writes its version beside the others, but what the run is read under (profile,
diagnose, reports, `gym runs`, trend, `gym data`) stays the version it was judged under until
the user makes another current; every output names the version it reads, and a report on disk
rendered under another version than the current one is called out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.reports.stamp import rendered_verifier_version
from gymflow.store.db import StoreError, connect
from gymflow.store.verifier_versions import current_verifier_version, make_current
from tests.analysis.builder import RunMeta, StoreBuilder, reseal
from tests.conftest import gym as gym_process
from tests.conftest import gym_in_process as gym  # reads and versions of a stored run


def _json(*args: str, cwd: Path) -> dict:
    out = gym(*args, "--json", cwd=cwd)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def _read_under(root: Path) -> dict[str, str]:
    """The version each reader reads the run under."""
    runs = _json("runs", "list", "runs", cwd=root)["runs"]
    trend = _json("runs", "trend", "arithmetic-smoke", "--root", "runs", cwd=root)["runs"]
    return {
        "profile": _json("eval", "profile", "runs/a", cwd=root)["verifier_version"],
        "diagnose": _json("eval", "diagnose", "runs/a", cwd=root)["verifier_version"],
        "health": _json("eval", "health", "runs/a", cwd=root)["verifier_version"],
        "runs list": runs[0]["verifier_version"],
        "trend": trend[0]["verifier_version"],
        "data select": _json("data", "select", "runs/a", "--dry-run", cwd=root)["verifier_version"],
        "data profile": _json("data", "profile", "runs/a", cwd=root)["verifier_version"],
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> Path:
    root = tmp_path_factory.mktemp("current")
    run = gym_process(
        "eval", "run", "--benchmark", "arithmetic-smoke", "--limit", "8", "--repeats", "2",
        "--out", "runs/a", cwd=root, env={"PREFECT_API_URL": prefect_api},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "verifier version: " in run.stdout
    return root


def test_a_what_if_reverify_is_read_only_once_made_current(root: Path) -> None:
    judged = _json("eval", "profile", "runs/a", cwd=root)["verifier_version"]
    report = root / "runs" / "a" / "report.html"
    assert rendered_verifier_version(report) == judged

    what_if = _json("eval", "reverify", "runs/a", "--set", "abs_tol=1.5", cwd=root)
    new = what_if["new_version"]
    assert new != judged and what_if["status"] == "written"
    assert what_if["current_version"] == judged and what_if["made_current"] is False
    assert what_if["flips"]["rollouts"]["to_pass"], "the tolerance flips near misses"
    # every reader stays on the version the run was judged under
    assert set(_read_under(root).values()) == {judged}
    text = gym("eval", "reverify", "runs/a", "--set", "abs_tol=1.5", cwd=root)
    assert f"still read under {judged}" in text.stdout
    assert f"gym eval use-version runs/a {new}" in text.stdout

    # made current: every reader moves, and says so; the report on disk is now stale
    made = gym("eval", "use-version", "runs/a", new, cwd=root)
    assert made.returncode == 0, made.stderr
    assert f"read under {new} from now on (was {judged})" in made.stdout
    assert set(_read_under(root).values()) == {new}
    profile = gym("eval", "profile", "runs/a", cwd=root)
    assert f"verifier {new}" in profile.stdout
    assert f"rendered under verifier version {judged}" in profile.stderr
    assert "gym report runs/a" in profile.stderr
    diagnose = gym("eval", "diagnose", "runs/a", cwd=root)
    assert f"verifier {new}" in diagnose.stdout and "rendered under" in diagnose.stderr

    # rendered again: the report records the current version, and the warning goes
    rendered = gym("report", "runs/a", cwd=root)
    assert f"(verifier {new})" in rendered.stdout
    assert rendered_verifier_version(report) == new
    page = report.read_text()
    assert f'<meta name="gymflow-verifier-version" content="{new}">' in page
    again = gym("eval", "profile", "runs/a", cwd=root)
    assert again.returncode == 0 and "rendered under" not in again.stderr

    # a reverify made current at once; back to the judged version by name
    tight = _json("eval", "reverify", "runs/a", "--set", "abs_tol=0.25", "--make-current", cwd=root)
    assert tight["made_current"] and tight["current_version"] == tight["new_version"]
    assert _json("eval", "profile", "runs/a", cwd=root)["verifier_version"] == tight["new_version"]
    back = _json("eval", "use-version", "runs/a", judged, cwd=root)
    assert back["current_version"] == judged and set(back["versions"]) >= {judged, new}
    # an older report under another explicitly requested version says it is not the current one
    other = gym("report", "runs/a", "--verifier-version", new, "--out", "runs/a/x.html", cwd=root)
    assert other.returncode == 0
    assert "not the version the run is read under now" in (root / "runs/a/x.html").read_text()


def test_an_unknown_version_is_refused_naming_the_known_ones(root: Path) -> None:
    out = gym("eval", "use-version", "runs/a", "no-such-version", cwd=root)
    assert out.returncode == 1
    assert "no verifier version 'no-such-version'" in out.stderr and "have: " in out.stderr


def test_the_current_version_without_a_choice_is_the_judged_one(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta())
    b.task("t0", 1)
    b.fill("t0", "10")
    store = b.write(tmp_path / "judged")
    with connect(store) as con:
        con.execute(
            "INSERT INTO verifier_versions (verifier_version, verifier_name, created_at) "
            "VALUES ('numeric_match@later', 'numeric_match', now() + INTERVAL 1 DAY)"
        )
        reseal(con)  # the version a reverify would have written, sealed as it seals it
        assert current_verifier_version(con) == b.verifier_version  # not the newest
        make_current(con, "numeric_match@later")
        assert current_verifier_version(con) == "numeric_match@later"
        with pytest.raises(StoreError, match="no verifier version 'gone'"):
            make_current(con, "gone")
