"""Every recorded factor that differs between two runs is named: the factors derive from the
recorded config, so no config field can be missed (the first test fails for a field that is
neither a factor nor declared in `config.NOT_FACTORS`)."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ValidationError

from gymflow.analysis.factors import attribution, changed_factors, differing_factors, groups_of
from gymflow.analysis.results import Factor
from gymflow.core.config import NOT_FACTORS, EvalConfig
from gymflow.store.runs import RunInfo
from tests.conftest import free_port
from tests.conftest import gym as gym_process
from tests.conftest import gym_in_process as gym  # reads of the stored runs
from tests.faults.test_run_control import ModelServer

BASE = {
    "benchmark": "arithmetic-smoke",
    "model": {"kind": "responses", "base_url": "http://127.0.0.1:8/v1"},
    "sampling": {"temperature": 0.5},
    "verifier_params": {"abs_tol": 0.0},
}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, annotation) of every leaf field of a config model."""
    for name, field in model.model_fields.items():
        inner = _model_of(field.annotation)
        if inner is not None:
            yield from _leaves(inner, f"{prefix}{name}.")
        elif typing.get_origin(field.annotation) is dict:
            yield f"{prefix}{name}.abs_tol", float  # a mapping's keys: one of them
        else:
            yield f"{prefix}{name}", field.annotation


def _candidates(annotation: Any) -> list[Any]:
    literal = [a for a in typing.get_args(annotation) if typing.get_origin(a) is Literal]
    if typing.get_origin(annotation) is Literal:
        literal = [annotation]
    choices = [value for lit in literal for value in typing.get_args(lit)]
    return [*choices, True, 3, 7, 0.25, 0.75, "x", "http://127.0.0.1:9/v1", "OTHER_KEY"]


def _set(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(data))
    *parents, leaf = key.split(".")
    node = copy
    for part in parents:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
    node[leaf] = value
    return copy


#: fields that take a value only beside another's: varied from a base that has it
WITH = {"model.chat_template": {"model": {**BASE["model"], "kind": "completions",
                                          "chat_template": "plain"}}}  # fmt: skip


def _base(key: str) -> EvalConfig:
    return EvalConfig.model_validate(BASE | WITH.get(key, {}))


def _changed(key: str, annotation: Any) -> EvalConfig:
    """The base config with `key` changed to some other value it accepts."""
    base = _base(key).model_dump(mode="json")
    current = _get(base, key)
    near = [current + 1, current * 2] if isinstance(current, int | float) else []
    for value in [*_candidates(annotation), *near]:
        if value == current or isinstance(value, bool) != isinstance(current, bool):
            continue
        try:
            return EvalConfig.model_validate(_set(base, key, value))
        except ValidationError:
            continue
    raise AssertionError(f"no other value found for {key}")


def _get(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = (node or {}).get(part)
    return node


def _run(config: EvalConfig) -> RunInfo:
    """A `runs` row as a run of this config records it (`rollouts/registration.py`); the
    columns no factor reads are left unset."""
    unset = dict.fromkeys(f.name for f in dataclasses.fields(RunInfo))
    return RunInfo(
        **unset
        | {
            "config_json": config.model_dump_json(exclude={"shard"}),
            "model": config.model.name,
            "harness": config.harness.name or "single_turn",
            "prompt_template": config.prompt_template or "{{ question }}",
            "sampling_json": config.sampling.model_dump_json() if config.sampling else None,
            "repeats": config.repeats or 4,
            "benchmark": config.benchmark,
            "environment": config.environment or "arithmetic",
            "dataset_version": "d1",
            "gymflow_version": "0.1",
        }
    )


LEAVES = [
    (key, annotation) for key, annotation in _leaves(EvalConfig) if not key.startswith("shard.")
]  # index < count: varied apart below


def test_every_config_field_is_a_named_factor_or_declared_not_one() -> None:
    for key, annotation in LEAVES:
        base = _base(key)
        changed = _changed(key, annotation)
        named = [f.key for f in differing_factors(_run(base), _run(changed), "v", "v")]
        groups = groups_of(changed_factors(base, changed))
        if any(key == skip or key.startswith(f"{skip}.") for skip in NOT_FACTORS):
            assert named == [] and groups == (), key
        else:
            assert named == [key], (key, named)
            assert len(groups) == 1, (key, groups)  # one field changed: one factor to vary


def test_the_shard_is_no_factor() -> None:
    base = EvalConfig.model_validate(BASE)
    sharded = EvalConfig.model_validate(BASE | {"shard": {"index": 1, "count": 2}})
    assert differing_factors(_run(base), _run(sharded), "v", "v") == []
    assert changed_factors(base, sharded) == [] and base.fingerprint() == sharded.fingerprint()


def test_a_run_recorded_before_a_field_existed_compares_as_its_default() -> None:
    base = EvalConfig.model_validate(BASE)
    recorded = json.loads(_run(base).config_json)
    del recorded["model"]["tool_choice"]
    old = dataclasses.replace(_run(base), config_json=json.dumps(recorded))
    assert differing_factors(old, _run(base), "v", "v") == []


def test_the_verifier_version_read_is_a_factor_of_the_verifier_group() -> None:
    base = EvalConfig.model_validate(BASE)
    (found,) = differing_factors(_run(base), _run(base), "v1", "v2")
    assert (found.factor, found.group, found.a, found.b) == (
        "verifier version",
        "verifier parameters",
        "v1",
        "v2",
    )


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> Path:
    """The same benchmark on the local policy, and on `gym serve model` over the Responses
    API: the model's kind and URL differ, nothing else."""
    root = tmp_path_factory.mktemp("factors")
    server = ModelServer(free_port(), root)
    server.start()
    url = f"http://127.0.0.1:{server.port}/v1"
    env = {"PREFECT_API_URL": prefect_api}
    common = ("--benchmark", "arithmetic-smoke", "--limit", "4", "--repeats", "2")
    try:
        for out, extra in (
            ("local", ()),
            ("served", ("--model-kind", "responses", "--model-url", url)),
        ):
            done = gym_process("eval", "run", *common, "--out", out, *extra, cwd=root, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        server.stop()
    return root


def test_profile_compare_and_compare_report_name_model_kind_and_url(two_runs: Path) -> None:
    out = gym("eval", "profile", "local", "--compare", "served", "--json", cwd=two_runs)
    assert out.returncode == 0, out.stderr
    found = {f["key"]: (f["a"], f["b"], f["group"]) for f in json.loads(out.stdout)["factors"]}
    url = found["model.base_url"][1]
    assert found == {
        "model.kind": ("local", "responses", "model"),
        "model.base_url": (None, url, "model"),
    }
    assert (
        "only the model differs (model.base_url, model.kind)"
        in json.loads(out.stdout)["attribution"]
    )
    text = gym("eval", "profile", "local", "--compare", "served", cwd=two_runs)
    assert "differs: model.kind: local vs responses" in text.stdout  # values, not reprs
    assert "no recorded factor differs" not in text.stdout
    report = gym("report", "local", "--compare", "served", cwd=two_runs)
    assert report.returncode == 0, report.stderr
    page = (two_runs / "local" / "compare.html").read_text()
    assert 'data-factor="model.kind"' in page and 'data-factor="model.base_url"' in page


def test_simulated_wherever_the_simulated_server_answered(two_runs: Path) -> None:
    """One predicate, from the answers' `model` field: the local policy and `gym serve model`
    reached over the Responses API are both simulated, and every surface says so."""
    for run in ("local", "served"):
        assert _json_of("eval", "profile", run, cwd=two_runs)["simulated"] is True
        text = gym("eval", "profile", run, cwd=two_runs)
        assert "SIMULATED: gymflow's simulated policy server answered" in text.stdout
        diagnose = gym("eval", "diagnose", run, cwd=two_runs)
        assert "SIMULATED" in diagnose.stdout
        page = (two_runs / run / "report.html").read_text()
        assert 'data-field="simulated"' in page
    compared = gym("eval", "profile", "local", "--compare", "served", cwd=two_runs)
    assert "A: SIMULATED" in compared.stdout and "B: SIMULATED" in compared.stdout
    gym("report", "local", "--compare", "served", cwd=two_runs, check=True)
    page = (two_runs / "local" / "compare.html").read_text()
    assert 'data-field="simulated"' in page and "answered both runs" in page


def _json_of(*args: str, cwd: Path) -> dict:
    out = gym(*args, "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _factor(key: str, group: str, a: Any, b: Any) -> Factor:
    return Factor(factor=key, key=key, group=group, a=a, b=b)


def test_attribution_names_only_the_factors_that_can_explain_a_paired_difference() -> None:
    """Runs paired on their shared tasks: a task limit changes which tasks a run holds, not how
    the shared ones come out. What is left is counted as it is listed; a large difference that
    nothing recorded explains is said to come from something gymflow does not record."""
    limit = _factor("limit", "dataset version", 8, 12)
    tokens = _factor("sampling.max_output_tokens", "sampling", 4, 32)
    temperature = _factor("sampling.temperature", "sampling", 0.0, 0.7)
    template = _factor("prompt_template", "prompt template", "a", "b")
    unexplained = attribution([limit], significant=True)
    assert "a factor gymflow does not record, such as the server's configuration" in unexplained
    assert "limit differs, but a task limit changes which tasks a run holds" in unexplained
    assert "attributed to it" not in unexplained
    assert "sampling noise" in attribution([limit], significant=False)
    only = attribution([limit, tokens])
    assert only.startswith("only the sampling differs (sampling.max_output_tokens)")
    assert "attributed to it" in only
    assert attribution([tokens, template]).startswith("2 factors differ, in 2 groups:")
    three = attribution([tokens, temperature, template])
    assert three.startswith("3 factors differ, in 2 groups: sampling.max_output_tokens (sampling)")


def test_what_the_servers_report_is_a_factor() -> None:
    base = EvalConfig.model_validate(BASE)
    a = {"props": {"model_path": "/m/a.gguf"}, "models": [{"id": "m"}]}
    b = {"props": {"model_path": "/m/b.gguf"}, "models": [{"id": "m"}]}
    found = differing_factors(_run(base), _run(base), "v", "v", server_a=a, server_b=b)
    assert [(f.key, f.group, f.a, f.b) for f in found] == [
        ("server.props.model_path", "model server", "/m/a.gguf", "/m/b.gguf")
    ]
    # one run without a report (an older store, a server that says nothing): not compared
    assert differing_factors(_run(base), _run(base), "v", "v", server_a=a) == []
