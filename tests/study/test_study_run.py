"""`gym study run` as a user runs it: a baseline of the local policy and four variants, each
changing one factor (the model's skill seed, the harness, the prompt, a verifier parameter), run
through Prefect, then the study report opened in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.conftest import gym as gym_process
from tests.conftest import gym_in_process as gym  # reads, reports, export and import
from tests.conftest import require_tool
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
def study_run(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> tuple[Path, dict]:
    cwd = tmp_path_factory.mktemp("study")
    (cwd / "study.yaml").write_text(yaml.safe_dump(STUDY))
    env = {"PREFECT_API_URL": prefect_api}
    result = gym_process(
        "study", "run", "study.yaml", "--json", cwd=cwd, env=env, timeout=600, check=True
    )
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
        variants = len(effects)
        assert effect["p_adjusted"] == pytest.approx(min(1.0, variants * effect["p_value"]))
        # the interval shown is simultaneous over the variants, and the colour follows it
        low, high = effect["ci95"]
        assert effect["significant"] is (low > 0 or high < 0)
    # the simulated policy's wrong answers are off by one: accepting them can only gain tasks
    loose = effects["off-by-one-ok"]
    assert loose["difference"] > 0 and not loose["lost"]
    assert loose["summary"]["reverify_only"]
    assert loose["summary"]["run_dir"].endswith("off-by-one-ok")
    # another checkpoint solves other tasks: some are gained, some lost
    other = effects["other-checkpoint"]
    assert other["gained"] and other["lost"]


def _store(run_dir: Path) -> tuple[int, list[str], list]:
    with duckdb.connect(str(run_dir / "gymflow.duckdb"), read_only=True) as con:
        calls = con.execute("SELECT count(*) FROM model_calls").fetchone()[0]
        versions = [
            v for (v,) in con.execute("SELECT verifier_version FROM verifier_versions").fetchall()
        ]
        rows = con.execute(
            "SELECT rollout_id, output_text FROM rollouts ORDER BY rollout_id"
        ).fetchall()
    return calls, versions, rows


def test_a_verifier_only_variant_is_a_reverify_not_new_inference(study_run):
    cwd, result = study_run
    runs = cwd / "runs" / "study"
    base_calls, base_versions, base_rows = _store(runs / "baseline")
    calls, versions, rows = _store(runs / "off-by-one-ok")
    # the baseline's rollouts, judged again under a second verifier version: no new model call
    assert rows == base_rows and len(rows) == 60 and calls == base_calls
    assert len(versions) == 2 and set(base_versions) < set(versions)
    # and the baseline's own store keeps only its verifier, so reading it later is not the
    # variant's verdicts by default
    assert base_versions == [result["baseline"]["verifier_version"]]
    # the variant's copy is read under the variant's verifier, as the study compared it
    loose = next(v for v in result["variants"] if v["summary"]["name"] == "off-by-one-ok")
    profiled = gym("eval", "profile", str(runs / "off-by-one-ok"), "--json", cwd=cwd, check=True)
    assert json.loads(profiled.stdout)["verifier_version"] == loose["summary"]["verifier_version"]
    assert loose["summary"]["verifier_version"] not in base_versions


def test_every_arm_of_the_simulated_policy_is_called_simulated(study_run, prefect_api: str):
    cwd, result = study_run
    arms = [result["baseline"], *(v["summary"] for v in result["variants"])]
    assert all(arm["simulated"] for arm in arms)
    page = Path(result["report"]).read_text()
    assert 'data-field="simulated"' in page and "answered every arm" in page
    env = {"PREFECT_API_URL": prefect_api}
    text = gym_process("study", "run", "study.yaml", cwd=cwd, env=env, check=True)
    assert "SIMULATED: gymflow's simulated policy server answered" in text.stdout


def test_running_the_study_again_resumes_and_runs_nothing_new(study_run, prefect_api: str):
    cwd, first = study_run
    env = {"PREFECT_API_URL": prefect_api}
    again = gym_process("study", "run", "study.yaml", "--json", cwd=cwd, env=env, check=True)
    again = json.loads(again.stdout)
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


#: The width a report is read at on a laptop screen.
LAPTOP = 1400


@pytest.mark.browser
def test_study_compare_and_trend_pages_fit_1400_pixels(study_run):
    """Every table of the study report, of a comparison of two arms and of the trend over
    the arms stays inside the page (long factor lists, paths, hashes and configs wrap)."""
    cwd, result = study_run
    runs = cwd / "runs" / "study"
    compare = cwd / "compare.html"
    gym("report", str(runs / "baseline"), "--compare", str(runs / "plain-prompt"), "--out",
        str(compare), cwd=cwd, check=True)  # fmt: skip
    trend = cwd / "trend.html"
    gym("runs", "trend", "arithmetic-smoke", "--root", str(runs), "--out", str(trend), cwd=cwd,
        check=True)  # fmt: skip
    pages = {"study": Path(result["report"]), "compare": compare, "trend": trend}
    shots = Path(__file__).resolve().parents[2] / "test-artifacts" / "study"
    shots.mkdir(parents=True, exist_ok=True)
    with chromium(require_tool("chromium")) as browser:
        for name, path in pages.items():
            page = visit(browser, path, javascript=False, screenshot=True, width=LAPTOP)
            (shots / f"{name}-1400.png").write_bytes(page.screenshot)
            assert page.extra["overflow"] == {"page": 0, "tables": []}, (name, page.extra)


def test_the_trend_says_what_it_mixes_and_narrows_to_one_arm(study_run):
    cwd, _result = study_run
    root = str(cwd / "runs" / "study")
    every = gym("runs", "trend", "arithmetic-smoke", "--root", root, cwd=cwd, check=True)
    # the arms are different policies: the prompt template differs, and the warning says so
    assert "warning: this trend mixes 2 prompt templates" in every.stderr.replace("\n", " ")
    assert "narrow it with --model or --arm" in every.stderr.replace("\n", " ")
    listed = json.loads(
        gym("runs", "trend", "arithmetic-smoke", "--root", root, "--json", cwd=cwd).stdout
    )
    assert "prompt templates" in listed["mixed"]
    page = Path(listed["report"]).read_text()
    one = gym("runs", "trend", "arithmetic-smoke", "--root", root, "--arm", "baseline", "--json",
              cwd=cwd, check=True)  # fmt: skip
    one = json.loads(one.stdout)
    assert one["mixed"] == {} and [Path(r["run_dir"]).name for r in one["runs"]] == ["baseline"]
    assert 'id="mixed"' in page
    # the arms ran on one day: the chart's labels tell them apart by their time (a verifier-only
    # arm is a copy of the baseline's store, made at the same time)
    labels = re.findall(r'<text[^>]*class="tick mid"[^>]*>([^<]*)</text>', page)
    assert len(labels) == len(listed["runs"]), labels
    assert len(set(labels)) == len({r["created_at"] for r in listed["runs"]}) > 1, labels
    nobody = gym("runs", "trend", "arithmetic-smoke", "--root", root, "--model", "nobody", cwd=cwd)
    assert nobody.returncode == 1 and "with --model nobody" in nobody.stderr


def test_a_run_compares_with_an_import_of_its_own_export(study_run):
    """`gym export` then `gym import` of one arm's run is the same benchmark version and
    dataset: it pairs with the run on every task (the same verdicts, no difference), and the
    factors named are only what an import cannot record (its harness, template, verifier)."""
    cwd, _result = study_run
    run = cwd / "runs" / "study" / "baseline"
    exported = cwd / "exported" / "baseline.jsonl"
    gym("export", str(run), "--format", "nemo-gym", "--out", str(exported), cwd=cwd, check=True)
    gym("import", "nemo-gym", str(exported), "--out", "imported", "--environment", "arithmetic",
        cwd=cwd, check=True)  # fmt: skip
    compared = gym("eval", "profile", str(run), "--compare", "imported", "--json", cwd=cwd,
                   check=True)  # fmt: skip
    comparison = json.loads(compared.stdout)
    assert comparison["tasks"] == 30 and comparison["difference"] == 0.0, comparison
    assert {f["factor"] for f in comparison["factors"]} <= {
        "harness",
        "prompt template",
        "verifier version",
    }, comparison["factors"]
    page = cwd / "self-compare.html"
    gym("report", str(run), "--compare", "imported", "--out", str(page), cwd=cwd, check=True)
    assert "paired" in page.read_text()
