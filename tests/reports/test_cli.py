"""`gym report` as a user runs it."""

from __future__ import annotations

import json
import shutil

from gymflow.core.config import EvalConfig
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.store.db import connect
from tests.conftest import gym_in_process as gym  # reads stored runs: no process needed
from tests.reports import pages
from tests.reports.conftest import profile_json


def test_report_verb_writes_where_asked(eval_run, workdir):
    out = workdir / "cli" / "run.html"
    result = gym("report", str(eval_run), "--out", str(out), cwd=workdir, check=True)
    assert f"report: {out.resolve()}" in result.stdout.replace("\n", "")
    assert pages.number(pages.read(out), "pass@1") == profile_json(eval_run)["pass@1"]


def test_compare_report_numbers_are_the_paired_comparison(eval_run, clean_run, workdir):
    a, b = str(eval_run), str(clean_run)
    result = gym("report", a, "--compare", b, cwd=workdir, check=True)
    out = eval_run / "compare.html"
    assert out.exists(), result.stdout
    expected = json.loads(
        gym("eval", "profile", a, "--compare", b, "--json", cwd=workdir, check=True).stdout
    )
    page = pages.read(out)
    assert pages.number(page, "compare.difference") == expected["difference"]
    assert pages.pair(page, "compare.ci95") == expected["ci95"]
    power = expected["power"]["tasks_needed"]
    assert power is None or pages.number(page, "compare.power") == power
    for side in ("a_only", "b_only"):
        assert pages.number(page, f"compare.flipped.{side}") == len(expected["flipped"][side])


def test_bad_input_is_a_clear_error_and_writes_nothing(eval_run, workdir):
    missing = gym("report", str(workdir / "nowhere"), cwd=workdir)
    assert missing.returncode == 1 and "no gymflow store" in missing.stderr
    assert not (workdir / "nowhere").exists()
    out = workdir / "cli" / "never.html"
    unknown = gym(
        "report",
        str(eval_run),
        "--verifier-version",
        "nope",
        "--out",
        str(out),
        cwd=workdir,
    )
    assert unknown.returncode == 1 and "no verifier version 'nope'" in unknown.stderr
    # A run of the environment without the benchmark: another protocol, another version.
    elsewhere = workdir / "cli" / "no-benchmark"
    con = connect(elsewhere, create=True)
    register_run(
        con, resolve(EvalConfig(environment="arithmetic", out=str(elsewhere))), resume=False
    )
    con.close()
    other = gym(
        "report",
        str(eval_run),
        "--compare",
        str(elsewhere),
        "--out",
        str(out),
        cwd=workdir,
    )
    assert other.returncode == 1 and "different benchmark versions" in other.stderr
    assert not out.exists()


def test_report_after_a_real_reverify_shows_its_flips(eval_run, workdir):
    run = workdir / "cli" / "reverified"
    shutil.copytree(eval_run, run)
    # A loose tolerance turns near-miss wrong answers (off by one) into passes.
    result = json.loads(
        gym(
            "eval",
            "reverify",
            str(run),
            "--set",
            "abs_tol=1.5",
            "--make-current",
            "--json",
            cwd=workdir,
            check=True,
        ).stdout
    )
    flipped = result["flips"]["rollouts"]
    assert flipped["to_pass"], "the tolerance change flips some rollouts"
    gym("report", str(run / "gymflow.duckdb"), cwd=workdir, check=True)  # the store file works too
    page = pages.read(run / "report.html")
    assert pages.number(page, "reverify.to_pass") == len(flipped["to_pass"])
    assert pages.number(page, "reverify.to_fail") == len(flipped["to_fail"])
    new = result["new_version"]
    assert pages.number(page, f"reverify.{new}.pass@1") == result["after"]["pass@1"]
    assert pages.number(page, "pass@1") == result["after"]["pass@1"]  # made current: shown


def test_a_run_with_nothing_collected_still_reports(workdir):
    run = workdir / "cli" / "empty"
    con = connect(run, create=True)
    register_run(
        con, resolve(EvalConfig(environment="arithmetic", limit=3, out=str(run))), resume=False
    )
    con.close()
    gym("report", str(run), cwd=workdir, check=True)
    page = pages.read(run / "report.html")
    assert pages.number(page, "coverage.missing") == 3
    assert page.fields["decision.action"] == "complete_run"  # `decide`: the run comes first
    assert "complete the run" in page.text and "No rollout is stored yet" in page.text
