"""`gym env init`: the scaffolded environment is found, lists, validates, serves and runs as
created, written against the author's API (`gymflow`'s top level) alone."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gymflow
from gymflow.environments.registry import PATH_VARIABLE
from gymflow.environments.scaffold import ScaffoldError, class_name, scaffold
from tests.conftest import gym, gym_in_process


@pytest.mark.prefect  # `gym eval run`: a flow on the suite's Prefect server
def test_init_creates_an_environment_that_validates(tmp_path: Path, prefect_api: str) -> None:
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

    ran = gym("eval", "run", "envs/shop-floor/eval.yaml", "--limit", "3", "--repeats", "1",
              cwd=tmp_path, env={**env, "PREFECT_API_URL": prefect_api}, check=True)  # fmt: skip
    assert "rollouts: 3/3" in ran.stdout and "pass@1 = 100.0%" in ran.stdout, ran.stdout


def test_the_scaffold_imports_gymflow_from_its_top_level_only(tmp_path: Path) -> None:
    scaffold("plain", tmp_path)
    tree = ast.parse((tmp_path / "plain" / "env.py").read_text())
    imported = [
        (node.module, [alias.name for alias in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gymflow")
    ]
    assert [module for module, _ in imported] == ["gymflow"]
    assert set(imported[0][1]) <= set(gymflow.__all__)


def test_every_name_of_the_author_api_resolves() -> None:
    missing = [name for name in gymflow.__all__ if getattr(gymflow, name, None) is None]
    assert missing == []
    assert gymflow.verifier.__module__ == "gymflow.verifiers.base"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = gymflow.nope


def test_importing_gymflow_stays_light() -> None:
    """The author's API loads on first use: `import gymflow` alone pulls in none of it."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import gymflow, sys; print(sorted(sys.modules))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "'gymflow'" in loaded
    assert not any(f"'{heavy}'" in loaded for heavy in ("pydantic", "gymflow.verifiers", "yaml"))


def test_init_refuses_bad_names_and_existing_folders(tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match="lowercase"):
        scaffold("Bad Name", tmp_path)
    scaffold("first", tmp_path)
    with pytest.raises(ScaffoldError, match="already exists"):
        scaffold("first", tmp_path)
    result = gym_in_process("env", "init", "first", "--dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert "already exists" in result.stderr


def test_class_name_is_a_python_identifier() -> None:
    assert class_name("my-env_2") == "MyEnv2Environment"
    assert class_name("my-env_2").isidentifier()
