"""The eval-run form: what the Prefect UI renders from the flow's parameter schema, and what a
filled-in form becomes. No Prefect server: the schema is built as `prefect deploy` builds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema
from pydantic import TypeAdapter, ValidationError

from gymflow.builtin.bfcl import env as bfcl_environment
from gymflow.core.config import EvalConfig, Sampling
from gymflow.environments.registry import benchmark_files, load_benchmark
from gymflow.flows.eval_run import evaluation_loop
from gymflow.flows.parameters import FlowConfig

CONFIG = TypeAdapter(FlowConfig)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return parameter_schema(evaluation_loop).model_dump()


def fields(schema: dict[str, Any], model: str) -> dict[str, dict[str, Any]]:
    return schema["definitions"][model]["properties"]


def test_the_benchmark_is_a_required_choice_from_the_registry(schema) -> None:
    form = fields(schema, "RunForm")
    assert form["benchmark"]["enum"] == sorted(benchmark_files())
    # required, so the UI marks it, and no other field is (each has a default)
    assert schema["definitions"]["RunForm"]["required"] == ["benchmark"]
    assert "default" not in form["benchmark"]


def _missing_package(root: Path) -> str:
    """An environment whose data package is not installed, and a benchmark over it."""
    manifest = (Path(bfcl_environment.__file__).parent / "environment.yaml").read_text()
    folder = root / "needs-a-package"
    folder.mkdir(parents=True)
    (folder / "environment.yaml").write_text(
        manifest.replace("name: bfcl\n", "name: needs-a-package\n").replace(
            "{module: bfcl_eval, install: pip install --no-deps bfcl-eval}",
            "{module: gymflow_no_such_package, install: pip install gymflow-no-such-package}",
        )
    )
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "needs-a-package-smoke.yaml").write_text(
        "name: needs-a-package-smoke\nenvironment: needs-a-package\nsplit: smoke\nrepeats: 1\n"
    )
    return "needs-a-package-smoke"


def test_a_benchmark_whose_package_is_missing_is_marked_and_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(tmp_path))
    name = _missing_package(tmp_path)
    field = fields(parameter_schema(evaluation_loop).model_dump(), "RunForm")["benchmark"]
    assert name in field["enum"]
    assert (
        f"Unavailable until its package is installed: {name} (pip install gymflow-no-"
        in (field["description"])
    )
    with pytest.raises(ValidationError) as refused:
        CONFIG.validate_python({"benchmark": name})
    message = str(refused.value)
    assert f"benchmark {name!r} cannot run on this worker" in message
    assert "pip install gymflow-no-such-package" in message


def test_every_field_is_described_and_none_is_typed_none(schema) -> None:
    for model in ("RunForm", "ModelForm", "SamplingForm", "HarnessForm", "ScaleOptions"):
        for name, field in fields(schema, model).items():
            assert field.get("description"), f"{model}.{name} has no description"
            assert "anyOf" not in field and field.get("default", 0) is not None, (model, name)
    assert "seconds" in fields(schema, "ModelForm")["timeout_s"]["description"].lower()
    assert "{date}" in fields(schema, "RunForm")["out"]["description"]
    # the fault-injection settings say what each does
    for name, field in schema["definitions"]["FaultSpec"]["properties"].items():
        assert field.get("description"), f"FaultSpec.{name} has no description"


def test_rules_are_in_the_schema(schema) -> None:
    sampling = fields(schema, "SamplingForm")
    assert sampling["temperature"]["maximum"] == 2.0 and sampling["temperature"]["minimum"] == 0
    assert sampling["top_p"]["exclusiveMinimum"] == 0.0
    assert fields(schema, "ScaleOptions")["shards"]["minimum"] == 1
    assert fields(schema, "RunForm")["repeats"]["minimum"] == 1
    assert fields(schema, "ModelForm")["kind"]["enum"] == ["local", "responses", "chat_completions"]


def test_sharding_is_set_in_one_place_and_test_settings_sit_apart(schema) -> None:
    form = fields(schema, "RunForm")
    assert "shard" not in form and "shards" in fields(schema, "ScaleOptions")
    assert "faults" not in fields(schema, "ModelForm")
    assert list(form)[-1] == "test_only"
    assert "faults" in fields(schema, "TestOnly")


def test_a_sampling_field_changes_only_itself() -> None:
    benchmark = load_benchmark("arithmetic-smoke").sampling
    config = CONFIG.validate_python(
        {"benchmark": "arithmetic-smoke", "sampling": {"temperature": 0.2}}
    )
    assert config.sampling.temperature == 0.2
    assert config.sampling.model_dump(exclude={"temperature"}) == benchmark.model_dump(
        exclude={"temperature"}
    )
    assert benchmark.max_output_tokens != Sampling().max_output_tokens, "the benchmark's own"


def test_an_untouched_form_is_the_same_run_as_the_cli(schema) -> None:
    submitted = CONFIG.validate_python({"benchmark": "arithmetic-smoke", "out": "runs/x"})
    assert submitted == EvalConfig(benchmark="arithmetic-smoke", out="runs/x")
    assert submitted.fingerprint() == EvalConfig(benchmark="arithmetic-smoke").fingerprint()


def test_test_settings_reach_the_local_policy() -> None:
    config = CONFIG.validate_python(
        {"benchmark": "arithmetic-smoke", "test_only": {"faults": {"rate_429": 0.5}}}
    )
    assert config.model.faults.rate_429 == 0.5


@pytest.mark.parametrize(
    ("form", "named"),
    [
        ({}, "benchmark\n  Field required"),
        ({"benchmark": "no-such-bench"}, "unknown benchmark 'no-such-bench'"),
        ({"benchmark": "arithmetic-smoke", "environment": "x"}, "environment"),
        ({"benchmark": "arithmetic-smoke", "sampling": {"temperature": 5}}, "sampling.temperature"),
        ({"benchmark": "arithmetic-smoke", "model": {"kind": "responses"}}, "model.base_url"),
        ({"benchmark": "arithmetic-smoke", "shard": {"index": 3, "count": 2}}, "shard"),
    ],
)
def test_bad_input_is_refused_naming_the_field(form, named) -> None:
    with pytest.raises(ValidationError, match=named.replace(".", r"\.")):
        CONFIG.validate_python(form)


def test_an_eval_config_passes_as_it_is() -> None:
    config = EvalConfig(benchmark="arithmetic-smoke", limit=3)
    assert CONFIG.validate_python(config) is config
    assert CONFIG.validate_python(config.model_dump(mode="json")) == config
