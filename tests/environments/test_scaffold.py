"""`gym env init`: the scaffolded environment is found, lists, validates and serves as created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.environments.registry import PATH_VARIABLE
from gymflow.environments.scaffold import ScaffoldError, class_name, scaffold
from tests.conftest import gym


def test_init_creates_an_environment_that_validates(tmp_path: Path) -> None:
    created = gym("env", "init", "shop-floor", "--dir", "envs", cwd=tmp_path, check=True)
    root = tmp_path / "envs"
    for name in (
        "shop-floor/environment.yaml",
        "shop-floor/env.py",
        "shop-floor/eval.yaml",
        "benchmarks/shop-floor-smoke.yaml",
    ):
        assert (root / name).is_file(), created.stdout
    assert f"{PATH_VARIABLE}={root}" in created.stdout

    env = {PATH_VARIABLE: str(root)}
    listed = gym("list", "environments", "shop-floor", "--json", cwd=tmp_path, env=env, check=True)
    detail = json.loads(listed.stdout)
    assert detail["name"] == "shop-floor"
    assert detail["entrypoint"] == "env:ShopFloorEnvironment"
    assert [tool["name"] for tool in detail["tool_schemas"]] == ["note"]
    assert detail["benchmarks"] == ["shop-floor-smoke"]

    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    checked = gym(
        "env", "validate", "envs/shop-floor/eval.yaml", "--ping", "--json", cwd=tmp_path, env=env
    )
    report = json.loads(checked.stdout)
    assert checked.returncode == 0, report
    assert report["problems"] == []
    assert any("10 rows of shop-floor/test render" in p for p in report["passed"])
    assert any("answers /health" in p for p in report["passed"])
    assert any("answers" in p and "model" in p for p in report["passed"])
    # validate writes nothing (bytecode caches of the imported env.py aside)
    after = sorted(
        p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "__pycache__" not in p.parts
    )
    assert after == [p for p in before if "__pycache__" not in p.parts]


def test_init_refuses_bad_names_and_existing_folders(tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match="lowercase"):
        scaffold("Bad Name", tmp_path)
    scaffold("first", tmp_path)
    with pytest.raises(ScaffoldError, match="already exists"):
        scaffold("first", tmp_path)
    result = gym("env", "init", "first", "--dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert "already exists" in result.stderr


def test_class_name_is_a_python_identifier() -> None:
    assert class_name("my-env_2") == "MyEnv2Environment"
    assert class_name("my-env_2").isidentifier()
