"""A study's arms: which factor each variant changes, and which are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.core.config import ConfigError
from gymflow.study.results import bonferroni
from gymflow.study.spec import StudySpec, resolve_study, store_of
from tests.conftest import gym

BASE = {"benchmark": "arithmetic-smoke", "repeats": 2, "sampling": {"temperature": 0.7}}


def _study(*variants: dict, out: str = "runs/s"):
    return resolve_study(
        StudySpec(name="s", out=out, baseline=BASE, variants=list(variants)), "study.yaml"
    )


def test_each_variant_names_the_one_factor_it_changes():
    study = _study(
        {"name": "ckpt", "set": {"model": {"skill_seed": 3}}},
        {"name": "harness", "set": {"harness": {"system_prompt": "Be brief."}}},
        {"name": "prompt", "set": {"prompt_template": "Q: {{ question }}"}},
        {"name": "hot", "set": {"sampling": {"temperature": 1.0}}},
        {"name": "loose", "set": {"verifier_params": {"abs_tol": 1.5}}},
        {"name": "more-repeats", "set": {"repeats": 4}},
    )
    isolates = {arm.name: arm.isolates for arm in study.variants}
    assert isolates == {
        "ckpt": "model",
        "harness": "harness",
        "prompt": "prompt template",
        "hot": "sampling",
        "loose": "verifier parameters",
        "more-repeats": "dataset version",
    }
    assert [arm.name for arm in study.variants if arm.reverify_only] == ["loose"]
    hot = next(arm for arm in study.variants if arm.name == "hot")
    # a variant changes only what it names: the baseline's other sampling settings stay
    assert hot.config.sampling.temperature == 1.0
    assert hot.config.repeats == 2
    assert Path(hot.config.out) == Path("runs/s/hot")


def test_a_variant_setting_one_sampling_key_keeps_the_benchmarks_others():
    # the baseline sets no sampling: it runs with the benchmark's (max_output_tokens 256), and a
    # variant naming only the temperature must not reset the token cap to the default 1024
    spec = StudySpec(
        name="s",
        baseline={"benchmark": "arithmetic-smoke", "repeats": 2},
        variants=[{"name": "cool", "set": {"sampling": {"temperature": 0.3}}}],
    )
    cool = resolve_study(spec, "study.yaml").variants[0]
    assert cool.keys == ("sampling.temperature",)
    assert cool.config.sampling.temperature == 0.3
    assert cool.config.sampling.max_output_tokens == 256


def test_a_variant_changing_two_factors_is_refused_unless_confounded():
    two = {"model": {"skill_seed": 3}, "prompt_template": "Q: {{ question }}"}
    with pytest.raises(ConfigError, match=r"variant 'both': changes 2 factors \(model, prompt"):
        _study({"name": "both", "set": two})
    arm = _study({"name": "both", "set": two, "confounded": True}).variants[0]
    assert arm.isolates is None and arm.factors == ("model", "prompt template")


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as caught:
        _study(
            {"name": "same", "set": {"repeats": 2}},
            {"name": "bad", "set": {"sampling": {"temperature": 9}}},
        )
    message = str(caught.value)
    assert "variant 'same': changes no factor" in message
    assert "variant 'bad'" in message and "sampling.temperature" in message


def test_arms_share_rollouts_where_their_configs_coincide():
    study = _study(
        {"name": "a", "set": {"model": {"skill_seed": 3}}},
        {"name": "b", "set": {"model": {"skill_seed": 3}, "concurrency": 8}},
        {"name": "loose", "set": {"verifier_params": {"abs_tol": 1.5}}},
    )
    stores = store_of(study)
    assert stores["b"] == stores["a"] == Path("runs/s/a")
    assert stores["baseline"] == Path("runs/s/baseline")
    assert stores["loose"] == Path("runs/s/loose")  # a copy of the baseline's, judged again


def test_bonferroni_matches_statsmodels():
    """Changed on purpose (issue 30): Bonferroni, whose verdicts its simultaneous intervals
    match, replaces Holm's step-down, which no displayed interval matched."""
    assert bonferroni([0.04, 0.01, None, 0.03]) == pytest.approx([0.12, 0.03, None, 0.09])
    assert bonferroni([0.6, 0.9]) == [1.0, 1.0]
    statsmodels = pytest.importorskip("statsmodels.stats.multitest")
    p = [0.002, 0.04, 0.013, 0.5, 0.021]
    expected = statsmodels.multipletests(p, method="bonferroni")[1]
    assert bonferroni(p) == pytest.approx(list(expected))


def test_a_model_on_another_server_is_one_factor_naming_its_keys(tmp_path: Path):
    served = {"kind": "responses", "base_url": "http://127.0.0.1:9/v1"}
    study = _study(
        {"name": "served", "set": {"model": served}},
        {"name": "forced-tools", "set": {"model": {"tool_choice": "required"}}},
    )
    keys = {arm.name: (arm.isolates, arm.keys) for arm in study.variants}
    assert keys == {
        "served": ("model", ("model.base_url", "model.kind")),
        "forced-tools": ("model", ("model.tool_choice",)),
    }
    spec = {
        "name": "s",
        "out": "runs/s",
        "baseline": BASE,
        "variants": [{"name": "served", "set": {"model": served}}],
    }
    (tmp_path / "study.yaml").write_text(json.dumps(spec))
    out = gym("study", "run", "study.yaml", "--check", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "served: model (model.base_url, model.kind)" in out.stdout
    two = {**spec, "variants": [{"name": "both", "set": {"model": served, "repeats": 4}}]}
    (tmp_path / "study.yaml").write_text(json.dumps(two))
    refused = gym("study", "run", "study.yaml", "--check", cwd=tmp_path)
    assert refused.returncode == 1
    assert "changes 2 factors (dataset version, model: repeats, model.base_url" in refused.stderr
