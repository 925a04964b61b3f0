"""Malformed configs exit non-zero, name the problem field, and write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import gym_in_process as gym  # refused before any run starts: no process needed

CASES = {
    "unknown_key": ("benchmark: arithmetic-smoke\nrepeets: 3\n", "repeets"),
    "wrong_type": ("benchmark: arithmetic-smoke\nrepeats: many\n", "repeats"),
    "nested_wrong_type": (
        "benchmark: arithmetic-smoke\nsampling: {temperature: hot}\n",
        "sampling.temperature",
    ),
    "missing_benchmark": ("benchmark: no-such-benchmark\n", "no-such-benchmark"),
    "malformed_yaml": ("benchmark: [arithmetic-smoke\n", "malformed YAML"),
    # YAML's .inf passed `gt=0`: the first retry slept forever, a call never timed out
    "infinite_backoff": ("benchmark: arithmetic-smoke\nmodel: {backoff_s: .inf}\n", "backoff_s"),
    "infinite_timeout": ("benchmark: arithmetic-smoke\nmodel: {timeout_s: .inf}\n", "timeout_s"),
    # past 64 bits it could not be sent: every rollout was a harness error
    "huge_max_output_tokens": (
        "benchmark: arithmetic-smoke\nsampling: {max_output_tokens: 1208925819614629174706176}\n",
        "sampling.max_output_tokens",
    ),
    # every stage enumerates tasks x repeats
    "huge_repeats": ("benchmark: arithmetic-smoke\nrepeats: 1000000000000\n", "repeats"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_is_refused(case: str, tmp_path: Path) -> None:
    text, expected = CASES[case]
    config = tmp_path / "eval.yaml"
    config.write_text(text + f"out: {tmp_path / 'out'}\n")
    result = gym("eval", "run", str(config), cwd=tmp_path)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert str(config) in result.stderr or case == "missing_benchmark"
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "runs").exists()


def test_bad_flag_value_is_refused(tmp_path: Path) -> None:
    result = gym("eval", "run", "--benchmark", "arithmetic-smoke", "--repeats", "0", cwd=tmp_path)
    assert result.returncode != 0
    assert "repeats" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_an_api_key_variable_that_is_not_set_is_refused_before_the_run(tmp_path):
    (tmp_path / "eval.yaml").write_text(
        "benchmark: arithmetic-smoke\n"
        "model: {kind: responses, base_url: 'http://127.0.0.1:9/v1',\n"
        "        api_key_env: GYMFLOW_NO_SUCH_KEY}\n"
        "out: run\n"
    )
    result = gym("eval", "run", "eval.yaml", cwd=tmp_path, env={"GYMFLOW_NO_SUCH_KEY": ""})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "model.api_key_env names GYMFLOW_NO_SUCH_KEY, which is not set" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()
