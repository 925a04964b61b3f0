"""Verdicts rewritten in the store: scores count `passed`, so `UPDATE verifications SET passed =
true WHERE NOT passed` took pass@1 from 59% to 100% and health stayed healthy (`passed = NULL`
on 50 rows: 34%, healthy). A verdict that is not its reward judged by the environment's pass
threshold is now an integrity failure: the run is unhealthy and the gate fails."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym_in_process as gym  # reads stored runs: no process needed
from tests.faults.stores import collect_run, copied_run, rollout_rows


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run every test here edits a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


@pytest.mark.parametrize(
    "forgery",
    [
        "UPDATE verifications SET passed = true WHERE NOT passed",
        "UPDATE verifications SET passed = NULL WHERE rollout_id IN "
        "(SELECT rollout_id FROM verifications LIMIT 3)",
        "UPDATE verifications SET passed = false WHERE passed",
    ],
    ids=["failed_as_passed", "verdict_removed", "passed_as_failed"],
)
def test_a_verdict_that_disagrees_with_its_reward_makes_the_run_unhealthy(
    honest: Path, tmp_path, forgery: str
) -> None:
    run = copied_run(honest, tmp_path / "run")
    healthy = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert json.loads(healthy.stdout)["checks"]["verdict_disagrees"]["count"] == 0

    con = duckdb.connect(str(run / "gymflow.duckdb"))
    changed = con.execute(forgery).fetchone()[0]
    con.close()
    assert changed > 0
    before = rollout_rows(run / "gymflow.duckdb")

    checked = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert checked.returncode != 0, checked.stdout
    report = json.loads(checked.stdout)
    assert report["verdict"] == "unhealthy"
    assert report["checks"]["verdict_disagrees"]["count"] == changed
    assert "verdict_disagrees" in report["gate_failures"]
    assert rollout_rows(run / "gymflow.duckdb") == before  # health judges, it changes nothing


def _forged_consistently(run) -> int:
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        changed = con.execute(
            "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed"
        ).fetchone()[0]
    finally:
        con.close()
    return changed


def test_verdicts_forged_consistently_are_found_by_judging_the_rollouts_again(
    honest: Path, tmp_path
) -> None:
    """`passed` and `reward` set together agree with each other: health reads the run healthy,
    and a routine reverify (which recomputes every seal first) refuses it. `reverify --check`
    judges every stored rollout again under the version's own parameters, lists each verdict
    that differs and exits 2, and writes nothing; on an unedited store it agrees (exit 0)."""
    run = copied_run(honest, tmp_path / "run")
    clean = gym("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    agreed = json.loads(clean.stdout)
    assert agreed["agrees"] and agreed["checked"] == agreed["agreed"] == 12

    with duckdb.connect(str(run / "gymflow.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT rollout_id FROM verifications WHERE NOT passed").fetchall()
    failing = {r for (r,) in rows}
    changed = _forged_consistently(run)
    assert changed == len(failing) > 0
    before = rollout_rows(run / "gymflow.duckdb")
    health = gym("eval", "health", str(run), "--json", cwd=tmp_path)
    assert json.loads(health.stdout)["checks"]["verdict_disagrees"]["count"] == 0  # consistent
    # a routine reverify recomputes every seal first: refused, nothing written (issue 42)
    same = gym("eval", "reverify", str(run), "--json", cwd=tmp_path)
    assert same.returncode == 2 and "do not match their seal" in same.stderr, same.stderr
    assert rollout_rows(run / "gymflow.duckdb") == before

    checked = gym("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    found = json.loads(checked.stdout)
    assert not found["agrees"] and found["count"] == changed
    assert {d["rollout_id"] for d in found["disagreements"]} == failing
    assert all(d["stored"] == "pass, reward 1.0" for d in found["disagreements"])
    assert all(d["recomputed"].startswith("fail") for d in found["disagreements"])
    shown = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert shown.returncode == 2 and f"{changed} differ" in shown.stdout
    assert found["disagreements"][0]["rollout_id"] in shown.stdout
    assert rollout_rows(run / "gymflow.duckdb") == before  # --check writes nothing


def test_a_verifier_of_live_state_cannot_be_checked_and_says_so(tmp_path) -> None:
    """backoffice's verifier reads the session's final state, which the store does not hold:
    its verdicts cannot be recomputed, and --check says so (exit 1) rather than agreeing."""
    run = collect_run(tmp_path / "run", benchmark="backoffice", limit=2, repeats=1)
    before = rollout_rows(run / "gymflow.duckdb")
    out = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "cannot be recomputed from the store" in " ".join(out.stderr.split())
    assert rollout_rows(run / "gymflow.duckdb") == before


def test_a_run_read_under_a_reverify_says_so_with_its_parameters(honest: Path, tmp_path) -> None:
    """After `use-version`, profile and health named the version read but not that it was a
    reverify, nor its parameters: the numbers read as the run's own. Both say it, in text and
    in --json, and reading changes nothing stored."""
    run = copied_run(honest, tmp_path / "run")
    done = gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", "--json", cwd=tmp_path)
    new = json.loads(done.stdout)["new_version"]
    own = json.loads(gym("eval", "profile", str(run), "--json", cwd=tmp_path).stdout)
    assert own["version_read"]["origin"] == "run"
    assert gym("eval", "use-version", str(run), new, cwd=tmp_path).returncode == 0
    before = rollout_rows(run / "gymflow.duckdb")
    for command in ("profile", "health"):
        read = json.loads(gym("eval", command, str(run), "--json", cwd=tmp_path).stdout)
        said = read["version_read"]
        assert (said["version"], said["origin"]) == (new, "reverify")
        assert said["params"]["abs_tol"] == 0.5
        assert said["reverified_from"] == said["judged_under"] == own["verifier_version"]
        text = " ".join(gym("eval", command, str(run), cwd=tmp_path).stdout.split())
        assert f"verifier {new}: a REVERIFY of the stored rollouts" in text
        assert '"abs_tol": 0.5' in text
    assert rollout_rows(run / "gymflow.duckdb") == before
