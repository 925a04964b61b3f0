"""`gym study run` as a user runs it: a baseline of the local policy and four variants, each
changing one factor (the model's skill seed, the harness, the prompt, a verifier parameter), run
through Prefect, then the study report opened in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.conftest import gym, require_tool
from tests.reports.browser import chromium, visit

STUDY = {
    "name": "four-factors",
    "out": "runs/study",
    "baseline": {"benchmark": "arithmetic-smoke", "repeats": 2, "limit": 30},
    "variants": [
        {"name": "other-checkpoint", "set": {"model": {"skill_seed": 5}}},
        {"name": "terse-harness", "set": {"harness": {"system_prompt": "Answer tersely."}}},
        {"name": "plain-prompt", "set": {"prompt_template": "{{ question }}\nAnswer: <number>"}},
        {"name": "off-by-one-ok", "set": {"verifier_params": {"abs_tol": 1.5}}},
    ],
}


@pytest.fixture(scope="module")
def study_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    cwd = tmp_path_factory.mktemp("study")
    (cwd / "study.yaml").write_text(yaml.safe_dump(STUDY))
    result = gym("study", "run", "study.yaml", "--json", cwd=cwd, timeout=600, check=True)
    return cwd, json.loads(result.stdout)


def test_each_variant_is_compared_with_the_baseline_on_its_one_factor(study_run):
    _cwd, result = study_run
    effects = {v["summary"]["name"]: v for v in result["variants"]}
    assert {name: v["summary"]["isolates"] for name, v in effects.items()} == {
        "other-checkpoint": "model",
        "terse-harness": "harness",
        "plain-prompt": "prompt template",
        "off-by-one-ok": "verifier parameters",
    }
    for effect in effects.values():
        assert effect["tasks"] == 30
        assert effect["summary"]["coverage"]["scored"] == 60
        assert effect["p_holm"] >= effect["p_value"]
    # the simulated policy's wrong answers are off by one: accepting them can only gain tasks
    loose = effects["off-by-one-ok"]
    assert loose["difference"] > 0 and not loose["lost"]
    assert loose["summary"]["reverify_only"]
    assert loose["summary"]["run_dir"] == result["baseline"]["run_dir"]
    # another checkpoint solves other tasks: some are gained, some lost
    other = effects["other-checkpoint"]
    assert other["gained"] and other["lost"]


def test_a_verifier_only_variant_is_a_reverify_not_new_inference(study_run):
    cwd, _result = study_run
    runs = cwd / "runs" / "study"
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == [
        "baseline", "other-checkpoint", "plain-prompt", "terse-harness",
    ]  # fmt: skip
    with duckdb.connect(str(runs / "baseline" / "gymflow.duckdb"), read_only=True) as con:
        versions = con.execute("SELECT count(*) FROM verifier_versions").fetchone()[0]
        rollouts = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]
    assert (versions, rollouts) == (2, 60)


def test_running_the_study_again_resumes_and_runs_nothing_new(study_run):
    cwd, first = study_run
    again = json.loads(gym("study", "run", "study.yaml", "--json", cwd=cwd, check=True).stdout)
    assert [v["difference"] for v in again["variants"]] == [
        v["difference"] for v in first["variants"]
    ]


@pytest.mark.browser
def test_the_study_report_reads_in_a_browser(study_run):
    _cwd, result = study_run
    report = Path(result["report"])
    with chromium(require_tool("chromium")) as browser:
        page = visit(browser, report, javascript=False, screenshot=True)
    assert page.requests == [] or all(r.startswith("file://") for r in page.requests)
    assert "Study four-factors: 4 variants against the baseline" in page.text
    for name in ("other-checkpoint", "terse-harness", "plain-prompt", "off-by-one-ok"):
        assert name in page.text
    assert "reverify of the baseline's rollouts: no inference" in page.text
    artifacts = Path(__file__).resolve().parents[2] / "test-artifacts" / "study"
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "study.png").write_bytes(page.screenshot)
