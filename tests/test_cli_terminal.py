"""The terminal as a new user meets it at 80 columns: what must be typed back is never cut or
wrapped, no Python repr is printed, errors name the flag, and the docs' claims hold."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from gymflow.analysis.health import health
from gymflow.cli.evaluate import build_config
from gymflow.environments.registry import load_benchmark
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import ROOT, gym, gym_in_process
from tests.faults.stores import gym_env

#: The pages that state the claims these tests check (docs/basics/options.md: the flags;
#: docs/components/analysis.md: the number of health checks).
OPTIONS_PAGE = (ROOT / "docs" / "basics" / "options.md").read_text()
ANALYSIS_PAGE = (ROOT / "docs" / "components" / "analysis.md").read_text()
NARROW = {"COLUMNS": "80"}
#: A run folder as a nightly layout names it: longer than an 80-column table can give a column.
LONG_RUN = "runs/nightly/arithmetic-test/2026-01-01-model-a-single-turn-seed-0"


def _no_repr(text: str) -> None:
    assert "{'" not in text and "['" not in text and ": None" not in text, text


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("narrow")
    b = StoreBuilder(RunMeta(repeats=3))
    for i in range(6):
        b.task(f"t{i}", 10 + i)
        b.fill(f"t{i}", ["111", "110", "100", "000", "101", "011"][i])
    b.write(cwd / LONG_RUN)
    return cwd


def test_health_at_80_columns_shows_every_check_name_whole(runs: Path):
    result = gym_in_process("eval", "health", LONG_RUN, cwd=runs, env=NARROW, check=True)
    with connect(runs / LONG_RUN, read_only=True) as con:
        names = list(health(con).checks)
    words = result.stdout.split()
    assert all(name in words for name in names), result.stdout
    table = [
        line for line in result.stdout.splitlines() if line.split()[:1] in ([n] for n in names)
    ]
    assert "…" not in result.stdout and max(map(len, table)) <= 80, result.stdout
    _no_repr(result.stdout)


def test_runs_list_at_80_columns_shows_the_run_path_whole(runs: Path):
    result = gym_in_process("runs", "list", "runs", cwd=runs, env=NARROW, check=True)
    assert LONG_RUN in result.stdout.split(), result.stdout
    assert "…" not in result.stdout and "None" not in result.stdout
    # The SQL hint runs as printed, with only the Python package gymflow installs.
    command = result.stdout.strip().splitlines()[-1]
    args = shlex.split(command)
    assert args[:2] == ["python", "-c"], command
    shown = subprocess.run(["python", "-c", args[2]], capture_output=True, text=True, check=True)
    assert "run_dir" in shown.stdout


def test_data_select_prints_the_command_to_evaluate_it_again_on_one_line(runs: Path):
    result = gym_in_process(
        "data", "select", LONG_RUN, "--pass-rate", "(0,1)", "--name", "mid", cwd=runs, env=NARROW
    )
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "gym eval run" in line]
    assert "GYMFLOW_BENCHMARKS_PATH=" in line and line.endswith("--benchmark mid"), line
    _no_repr(result.stdout)
    profile = gym_in_process(
        "data", "profile", LONG_RUN, "--pass-rate", "(0,1)", cwd=runs, env=NARROW
    )
    assert "selection (pass_rate=(0,1)): keeps 4 of 6 tasks" in profile.stdout, profile.stdout


def test_profile_compare_and_diagnose_print_no_reprs_nor_long_floats(runs: Path):
    compared = gym_in_process(
        "eval", "profile", LONG_RUN, "--compare", LONG_RUN, cwd=runs, env=NARROW, check=True
    )
    assert "coverage: expected 18, scored 18, failed 0, missing 0" in compared.stdout
    assert re.search(r"correlation \d(\.\d{1,2})?\b", compared.stdout), compared.stdout
    assert not re.search(r"\d\.\d{5,}", compared.stdout), compared.stdout
    diagnosed = gym_in_process("eval", "diagnose", LONG_RUN, cwd=runs, env=NARROW, check=True)
    assert re.search(r"evidence: \d+ rollouts \([a-z_]+ \d+", diagnosed.stdout), diagnosed.stdout
    for output in (compared.stdout, diagnosed.stdout):
        _no_repr(output)


def test_an_unknown_verifier_parameter_names_the_flag_and_the_known_ones(runs: Path):
    result = gym_in_process("eval", "reverify", LONG_RUN, "--set", "bogus=1", cwd=runs)
    assert result.returncode == 1
    assert "--set: " in result.stderr and "bogus: not a parameter of numeric_match" in result.stderr
    assert "its parameters: extract" in result.stderr
    assert "Extra inputs" not in result.stderr


def test_validate_ping_checks_the_api_key_variable(tmp_path: Path):
    config = tmp_path / "my-eval.yaml"
    config.write_text(
        "benchmark: arithmetic-smoke\nlimit: 2\nmodel: {kind: responses, base_url: "
        '"http://127.0.0.1:9/v1", name: m, api_key_env: GYMFLOW_TEST_UNSET_KEY}\n'
    )
    result = gym_in_process("env", "validate", str(config), "--ping", cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "FAIL model.api_key_env names GYMFLOW_TEST_UNSET_KEY, which is not set" in result.stdout
    assert not result.stdout.rstrip().endswith("valid")


def test_sampling_flags_change_one_setting_and_keep_the_benchmarks_others():
    config = build_config(None, {"benchmark": "arithmetic-smoke", "sampling.temperature": 0.2})
    benchmark = load_benchmark("arithmetic-smoke").sampling
    assert config.sampling == benchmark.model_copy(update={"temperature": 0.2})


def test_the_flags_the_docs_name_exist():
    """The options page's list of `gym eval run` flags, each in `gym eval run --help`."""
    flat = " ".join(OPTIONS_PAGE.split())
    (claim,) = re.findall(r"(?i)the fields most often varied also have flags \(([^)]*)\)", flat)
    flags = re.findall(r"`(--[a-z-]+)`", claim)
    assert {"--temperature", "--api-key-env", "--harness", "--prompt-template"} <= set(flags)
    shown = gym_in_process(
        "eval", "run", "--help", cwd=ROOT, env={"COLUMNS": "200"}, check=True
    ).stdout
    missing = [flag for flag in flags if not re.search(rf"{flag}\b", shown)]
    assert not missing, missing


def test_the_docs_count_the_health_checks_there_are(runs: Path):
    (claimed,) = re.findall(r"gym eval health \S+ \[--json\]\s+# (\d+) checks", ANALYSIS_PAGE)
    with connect(runs / LONG_RUN, read_only=True) as con:
        assert int(claimed) == len(health(con).checks)


def test_resume_says_what_it_does(tmp_path: Path, prefect_api: str):
    args = ("eval", "run", "--benchmark", "arithmetic-smoke", "--limit", "2", "--repeats", "1")
    env = gym_env(prefect_api, COLUMNS="80")
    first = gym(*args, "--out", "runs/typo", "--resume", cwd=tmp_path, env=env, check=True)
    said = " ".join(first.stdout.split())
    assert "--resume: runs/typo holds no run yet" in said and "a new run of 2 rollouts" in said
    again = gym(*args, "--out", "runs/typo", "--resume", cwd=tmp_path, env=env, check=True)
    assert "nothing to collect: runs/typo already holds all 2 rollouts" in again.stdout


def test_an_import_without_an_environment_says_what_reverify_needs(tmp_path: Path):
    from tests.interop.test_real_files import DATA

    rows = DATA / "blackjack" / "example_rollouts.jsonl"
    gym_in_process("import", "nemo-gym", str(rows), "--out", "runs/ng", cwd=tmp_path, check=True)
    refused = gym_in_process("eval", "reverify", "runs/ng", cwd=tmp_path)
    assert refused.returncode == 1
    said = " ".join(refused.stderr.split())
    assert "names no environment (imported without --environment?)" in said, said
    assert "unknown environment ''" not in said
    listed = gym_in_process("runs", "list", "runs", cwd=tmp_path, env=NARROW, check=True)
    assert "None" not in listed.stdout and "runs/ng" in listed.stdout.split(), listed.stdout


def test_a_bad_flag_value_is_named_by_its_flag(tmp_path: Path):
    result = gym_in_process(
        "eval", "run", "--benchmark", "arithmetic-smoke", "--temperature", "5",
        "--concurrency", "0", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "  - --temperature: Input should be less than or equal to 2" in result.stderr
    assert "  - --concurrency: Input should be greater than or equal to 1" in result.stderr
    assert "sampling.temperature" not in result.stderr


def test_compare_html_shows_effective_settings_as_values(tmp_path: Path):
    """A config that left sampling to the benchmark and one that wrote the same 0.7 do not
    differ; a setting that does differ reads as a value, never a repr or `null`."""
    configs = {
        "a": {"benchmark": "arithmetic-test", "sampling": None, "model": {"name": "x"}},
        "b": {
            "benchmark": "arithmetic-test",
            "sampling": {"temperature": 0.7, "top_p": 1.0},
            "model": {"name": "x", "api_key_env": None},
        },
    }
    for side, config in configs.items():
        b = StoreBuilder(RunMeta(run_id=f"run-{side}", model=f"model-{side}", repeats=2))
        b.task("t0", 10)
        b.fill("t0", "10")
        b.after_write.append(("UPDATE runs SET config_json = ?", [json.dumps(config)]))
        b.reseal = True
        b.write(tmp_path / side)
    gym_in_process("report", "a", "--compare", "b", cwd=tmp_path, check=True)
    page = (tmp_path / "a" / "compare.html").read_text()
    changes = page[page.index('id="factors"') : page.index('<div class="pair">')]
    assert 'data-factor="sampling' not in changes and "null" not in changes
    assert "{&#39;" not in page and "&#39;: None" not in page and "{'" not in page
    assert "<code>model-a</code>" in changes and "<code>model-b</code>" in changes
