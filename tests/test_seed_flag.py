"""`--seed` changes the seed only: vary one thing at a time, even from the command line."""

from __future__ import annotations

from pathlib import Path

from gymflow.cli.evaluate import build_config
from gymflow.environments.registry import load_benchmark


def test_seed_keeps_the_benchmarks_other_sampling_settings():
    config = build_config(None, {"benchmark": "arithmetic-smoke", "sampling.seed": 5})
    expected = load_benchmark("arithmetic-smoke").sampling.model_copy(update={"seed": 5})
    assert config.sampling == expected
    assert config.sampling.max_output_tokens == 256  # the benchmark's, not the generic 1024


def test_seed_on_a_config_file_without_sampling_keeps_the_benchmarks(tmp_path: Path):
    path = tmp_path / "eval.yaml"
    path.write_text("benchmark: arithmetic-smoke\nrepeats: 2\n")
    config = build_config(path, {"sampling.seed": 9})
    assert config.sampling.temperature == 0.7 and config.sampling.seed == 9


def test_seed_on_a_config_file_with_sampling_changes_only_the_seed(tmp_path: Path):
    path = tmp_path / "eval.yaml"
    path.write_text("benchmark: arithmetic-smoke\nsampling: {temperature: 0.2, seed: 1}\n")
    config = build_config(path, {"sampling.seed": 9})
    assert (config.sampling.temperature, config.sampling.seed) == (0.2, 9)


def test_a_config_files_sampling_section_changes_only_the_keys_it_names(tmp_path: Path):
    path = tmp_path / "eval.yaml"
    path.write_text("benchmark: arithmetic-smoke\nsampling: {temperature: 0.2}\n")
    config = build_config(path, {})
    expected = load_benchmark("arithmetic-smoke").sampling.model_copy(update={"temperature": 0.2})
    assert config.sampling == expected
    assert config.sampling.max_output_tokens == 256  # the benchmark's, not the generic 1024
