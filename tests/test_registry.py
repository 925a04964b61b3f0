"""One registry behind verifiers, harnesses and environments: lookups, one error, and a
verifier's own declaration of how it runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from gymflow.core.registry import Registry, RegistryError, UnknownName
from gymflow.environments.registry import (
    BUILTIN_DIR,
    load_benchmark,
    load_environment,
    read_manifest,
)
from gymflow.harness import get_harness
from gymflow.verifiers.base import VERIFIERS, get_verifier, verifier


class NoParams(BaseModel):
    pass


def test_a_registry_loads_its_builtins_once_and_names_what_it_holds() -> None:
    loads: list[int] = []
    numbers: Registry[int] = Registry("number", builtins=lambda: loads.append(1))
    numbers.register("two", 2)
    assert (numbers.get("two"), numbers.names(), "two" in numbers) == (2, ["two"], True)
    with pytest.raises(UnknownName, match=r"^unknown number 'three' \(known: two\)$") as caught:
        numbers.get("three")
    assert (caught.value.kind, caught.value.name, caught.value.known) == (
        "number",
        "three",
        ["two"],
    )
    assert loads == [1]


@pytest.mark.parametrize(
    ("lookup", "kind", "known"),
    [
        (get_verifier, "verifier", "code_exec"),
        (get_harness, "harness", "single_turn, tool_loop"),
        (load_environment, "environment", "arithmetic"),
        (load_benchmark, "benchmark", "arithmetic"),
    ],
)
def test_every_unknown_name_is_one_error_naming_kind_name_and_known(lookup, kind, known) -> None:
    with pytest.raises(UnknownName, match=rf"^unknown {kind} 'nope' \(known: .*{known}") as caught:
        lookup("nope")
    assert isinstance(caught.value, RegistryError | LookupError)
    assert caught.value.kind == kind


def test_the_built_in_verifiers_declare_how_they_run_and_their_bound() -> None:
    declared = {
        name: (VERIFIERS.get(name).runs, VERIFIERS.get(name).timeout_s)
        for name in VERIFIERS.names()
    }
    assert declared["code_exec"] == ("worker", 300.0)
    assert declared["math_answer"] == ("worker", 300.0)
    assert declared["math_judge"] == ("threads", 300.0)
    assert declared["numeric_match"] == declared["exact_match"] == ("inline", None)


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"timeout_s": 5.0}, "an inline verifier cannot be bounded"),
        ({"runs": "gpu"}, r"runs='gpu' \(known: inline, worker, threads\)"),
        ({"runs": "worker", "timeout_s": float("inf")}, "timeout_s=inf is not a positive number"),
    ],
)
def test_a_verifier_declaration_that_cannot_hold_is_refused(declaration, message) -> None:
    with pytest.raises(ValueError, match=message):
        verifier("never_registered", params=NoParams, **declaration)
    assert "never_registered" not in VERIFIERS


def test_a_worker_verifier_without_a_bound_gets_the_default() -> None:
    verifier("test_unbounded_worker", params=NoParams, runs="worker")(lambda inp, params: None)
    assert get_verifier("test_unbounded_worker").timeout_s == 300.0


def test_a_manifest_setting_the_removed_timeout_says_what_replaces_it(tmp_path: Path) -> None:
    manifest = yaml.safe_load((BUILTIN_DIR / "arithmetic" / "environment.yaml").read_text())
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump({**manifest, "verify_timeout_s": 30}))
    with pytest.raises(RegistryError, match=r"verify_timeout_s: removed; .*runs='worker'"):
        read_manifest(path)


def test_an_entrypoint_that_names_no_environment_class_is_refused_naming_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`entrypoint: env:make` naming a function: refused when loaded, with the file it is in,
    instead of failing later on a call no function answers."""
    manifest = yaml.safe_load((BUILTIN_DIR / "arithmetic" / "environment.yaml").read_text())
    folder = tmp_path / "not-a-class"
    folder.mkdir()
    (folder / "environment.yaml").write_text(
        yaml.safe_dump({**manifest, "name": "not-a-class", "entrypoint": "env:make"})
    )
    (folder / "env.py").write_text("def make(manifest, folder):\n    return None\n")
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(tmp_path))
    expected = f"{folder / 'env'}.py: 'env:make' is not an Environment class"
    with pytest.raises(RegistryError, match=re.escape(expected)):
        load_environment("not-a-class")
