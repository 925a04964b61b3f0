"""What a report says, checked in Python against the analysis it was built from."""

from __future__ import annotations

import json

from gymflow.reports.render import export_path, write_report
from gymflow.reports.sections import Limits
from tests.conftest import gym
from tests.reports import pages
from tests.reports.conftest import CLEAN, CONSTRUCTED, EVIL_TASK, PAYLOAD, SECOND, profile_json


def assert_matches_profile(page: pages.Page, profile: dict) -> None:
    assert pages.number(page, "pass@1") == profile["pass@1"]
    assert pages.pair(page, "ci95") == profile["ci95"]
    for key in ("expected", "scored", "failed", "missing"):
        assert pages.number(page, f"coverage.{key}") == profile["coverage"][key]
    for k, value in profile["pass@k"].items():
        assert pages.number(page, f"pass@k.{k}") == value
        assert pages.number(page, f"pass^k.{k}") == profile["pass^k"][k]


def task_codes(page: pages.Page) -> list[str]:
    return [value for name, value in page.fields.items() if name.startswith("codes.")]


def test_eval_run_writes_the_report_and_failures_are_drawn_apart(eval_run):
    report = eval_run / "report.html"
    assert report.exists(), "gym eval run writes report.html into the run directory"
    page = pages.read(report)
    profile = profile_json(eval_run)
    assert_matches_profile(page, profile)
    failed = profile["coverage"]["failed"]
    assert failed > 0
    cells = [attrs.get("class") for tag, attrs in page.tags if tag == "rect"]
    assert cells.count("oF") == failed + 1  # one per failed rollout, and the legend's
    assert "".join(task_codes(page)).count("F") == failed
    assert "model_failure: server_error" in page.text  # the taxonomy bar
    assert "simulated" in page.text


def test_first_screen_carries_the_diagnosis_decision_and_its_example_rollouts(eval_run, workdir):
    diagnosis = json.loads(
        gym("eval", "diagnose", str(eval_run), "--json", cwd=workdir, check=True).stdout
    )
    page = pages.read(eval_run / "report.html")
    decision = diagnosis["decision"]
    assert page.fields["decision.action"] == decision["action"]
    for bucket, value in diagnosis["buckets"].items():
        assert pages.number(page, f"buckets.{bucket}") == value["tasks"]
    shown = {
        attrs["data-rollout"]
        for tag, attrs in page.tags
        if tag == "details" and "data-rollout" in attrs
    }
    # a quarter of the rollouts failed: health comes first, the evidence's pick is the runner-up
    assert decision["action"] == "fix_health" and decision["evidence"] is None
    assert shown == set(decision["runner_up"]["examples"]) != set()


def test_clean_run_report_is_the_profile(clean_run, workdir):
    page = pages.read(write_report(clean_run, out=workdir / "clean.html").path)
    profile = profile_json(clean_run)
    assert_matches_profile(page, profile)
    assert profile["coverage"]["failed"] == profile["coverage"]["missing"] == 0
    assert task_codes(page) == CLEAN
    assert pages.number(page, "buckets.sometimes_pass") == 4
    assert page.fields["health.verdict"] == "healthy"


def test_constructed_run_shows_every_outcome_and_the_reward_changes(constructed_run, workdir):
    newest = profile_json(constructed_run)
    assert newest["verifier_version"] == SECOND
    page = pages.read(write_report(constructed_run, out=workdir / "constructed.html").path)
    assert_matches_profile(page, newest)
    # Under the second version task 1's wrong answers and task 2's first repeat pass; the
    # verifier-error rollout was not re-scored, so it stays unscored.
    assert task_codes(page) == ["PPPP", "PPPP", "PWWW", "FMPW", "EPPP", "PWMF"]
    assert pages.number(page, "reverify.to_pass") == 3
    assert pages.number(page, "reverify.to_fail") == 0
    assert pages.number(page, f"reverify.{SECOND}.pass@1") == newest["pass@1"]
    assert pages.number(page, "coverage.missing") == 2


def test_an_older_verifier_version_can_be_reported(constructed_run, first_version, workdir):
    out = write_report(
        constructed_run, out=workdir / "first.html", verifier_version=first_version
    ).path
    page = pages.read(out)
    assert_matches_profile(page, profile_json(constructed_run, "--verifier-version", first_version))
    assert task_codes(page) == CONSTRUCTED
    # The reward changes still read forward in time: from this version to the next.
    assert pages.number(page, "reverify.to_pass") == 3


def test_hostile_strings_render_as_text(constructed_run, workdir):
    out = write_report(constructed_run, out=workdir / "hostile.html").path
    page = pages.read(out)
    assert page.scripts == 1, "only the report's own table script"
    for tag, attrs in page.tags:
        assert tag not in ("img", "iframe", "object", "embed", "link", "textarea"), tag
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        for name in ("href", "src", "action", "formaction", "xlink:href"):
            value = attrs.get(name)
            assert value is None or value.startswith(("#", "./")), (tag, attrs)
    assert PAYLOAD not in out.read_text()
    assert PAYLOAD in page.text  # shown where the model wrote it, as text
    assert EVIL_TASK in page.text


def test_trajectories_beyond_the_inline_limit_go_to_a_jsonl_beside_the_report(
    constructed_run, first_version, workdir
):
    out = workdir / "limited" / "report.html"
    write_report(
        constructed_run, out=out, verifier_version=first_version, limits=Limits(inline_examples=1)
    )
    page = pages.read(out)
    links = [attrs["href"] for tag, attrs in page.tags if tag == "a" and attrs["href"][0] == "."]
    assert links == ["./report.trajectories.jsonl"]
    rows = [json.loads(line) for line in export_path(out).read_text().splitlines()]
    # Sometimes-pass under the first version: tasks 1, 3 and 5, most variable first; task 1
    # (2 of 4) is inlined, the other two go to the file with a passing and a failing rollout.
    assert sorted((row["task_id"], row["passed"]) for row in rows) == sorted(
        (task, passed) for task in ("arith-00003", EVIL_TASK) for passed in (True, False)
    )
    assert all(row["trajectory"][-1]["role"] == "assistant" for row in rows)
