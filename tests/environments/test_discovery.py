"""`gym list` and `gym search`: shipped, user-folder and entry-point environments, ranked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gymflow.environments import registry
from gymflow.environments.registry import PATH_VARIABLE
from gymflow.environments.scaffold import scaffold
from gymflow.environments.search import load_catalog, search
from tests.conftest import gym, gym_in_process

SHIPPED = registry.BUILTIN_DIR


def _fixture_env(root: Path, name: str, **manifest: object) -> None:
    scaffold(name, root)
    path = root / name / "environment.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(manifest)
    path.write_text(yaml.safe_dump(data))


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Look-alikes of the shipped environments, plus decoys that mention the query words."""
    root = tmp_path_factory.mktemp("envs")
    _fixture_env(
        root,
        "callbench",
        domain="function-calling",
        tags=["function-calling", "tools", "single-turn"],
        description="Single-turn function calling: pick the right function and arguments.",
    )
    _fixture_env(
        root,
        "pycode",
        domain="code",
        tags=["code", "python"],
        description="Write Python functions that pass unit tests.",
    )
    _fixture_env(
        root,
        "decoy",
        domain="text",
        tags=["writing"],
        description="Describe what a function does when calling it, in plain words; no code.",
    )
    return root


def test_ranking_on_fixture_environments(fixture_root: Path, monkeypatch) -> None:
    monkeypatch.setenv(PATH_VARIABLE, str(fixture_root))
    catalog = load_catalog()
    names = [e.name for e in catalog.environments]
    assert {"arithmetic", "callbench", "pycode", "decoy"} <= set(names)

    hits = search("function calling", catalog)
    first = next(h for h in hits if h.entry.name in ("callbench", "decoy"))
    assert first.entry.name == "callbench"
    assert hits[0].entry.domain == "function-calling"
    assert {"domain", "tags"} <= set(first.matched)

    hits = search("code", catalog)
    assert hits[0].entry.kind == "environment" and hits[0].entry.domain == "code"
    ranked = [h.entry.name for h in hits]
    assert ranked.index("pycode") < ranked.index("decoy")
    # a benchmark ranks right after its environment, never before it
    assert ranked.index("pycode") < ranked.index("pycode-smoke")

    by_tool = search("send email", catalog)[0]  # a tool name is a reason to find an environment
    assert by_tool.entry.name == "backoffice" and "tools" in by_tool.matched

    assert search("   ", catalog) == []
    assert search("zebra crossing", catalog) == []


def test_list_and_search_as_subprocesses(fixture_root: Path, tmp_path: Path) -> None:
    env = {PATH_VARIABLE: str(fixture_root)}
    listed = json.loads(
        gym("list", "environments", "--json", cwd=tmp_path, env=env, check=True).stdout
    )
    by_name = {row["name"]: row for row in listed}
    assert by_name["arithmetic"]["splits"] == {"smoke": 50, "test": 500, "full": 2000}
    assert by_name["callbench"]["path"] == str(fixture_root / "callbench")

    table = gym("list", "environments", cwd=tmp_path, env=env, check=True).stdout
    assert "arithmetic" in table and "callbench" in table and "numeric_match" in table

    benchmarks = json.loads(
        gym("list", "benchmarks", "--json", cwd=tmp_path, env=env, check=True).stdout
    )
    smoke = next(b for b in benchmarks if b["name"] == "arithmetic-smoke")
    assert smoke["environment"] == "arithmetic" and smoke["repeats"] == 4
    assert len(smoke["version"]) == 12
    assert "pycode-smoke" in {b["name"] for b in benchmarks}

    found = json.loads(
        gym("search", "function calling", "--json", cwd=tmp_path, env=env, check=True).stdout
    )
    assert found[0]["domain"] == "function-calling" and found[0]["kind"] == "environment"
    names = [hit["name"] for hit in found]
    assert names.index("callbench") < names.index("decoy")

    orphan = fixture_root / "benchmarks" / "orphan.yaml"
    orphan.write_text("name: orphan\nenvironment: gone\n")
    try:
        listed = gym("list", "benchmarks", cwd=tmp_path, env=env, check=True)
    finally:
        orphan.unlink()
    assert "orphan" in listed.stdout
    assert f"warning: {orphan}: environment 'gone' is not installed" in listed.stderr

    text = gym("search", "python code", cwd=tmp_path, env=env, check=True).stdout
    assert "pycode" in text
    assert "nothing matches" in gym("search", "zebra", cwd=tmp_path, env=env, check=True).stdout


def test_one_environment_in_full(tmp_path: Path) -> None:
    detail = json.loads(
        gym_in_process(
            "list", "environments", "arithmetic", "--json", cwd=tmp_path, check=True
        ).stdout
    )
    assert detail["verifier"] == {"name": "numeric_match", "params": {"extract": "answer_line"}}
    assert detail["verifier_version"].startswith("numeric_match@")
    assert "arithmetic-smoke" in detail["benchmarks"]
    assert "{{ question }}" in detail["prompt_template"]
    shown = gym_in_process("list", "environments", "arithmetic", cwd=tmp_path, check=True).stdout
    assert "prompt template" in shown and "numeric_match@" in shown

    missing = gym_in_process("list", "environments", "no-such-env", cwd=tmp_path)
    assert missing.returncode == 1 and "unknown environment 'no-such-env'" in missing.stderr


def test_environments_from_an_entry_point(tmp_path: Path) -> None:
    """A package that declares the `gymflow.environments` entry point adds its folder."""
    envs = tmp_path / "plugin_envs"
    _fixture_env(envs, "plugged", domain="plugins", description="Found through an entry point.")
    site = tmp_path / "site"
    dist = site / "gymflow_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gymflow-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[gymflow.environments]\nplugged = gymflow_plugin:environments_folder\n"
    )
    (site / "gymflow_plugin.py").write_text(
        f"def environments_folder():\n    return {str(envs)!r}\n"
    )
    env = {"PYTHONPATH": str(site)}
    listed = json.loads(
        gym("list", "environments", "--json", cwd=tmp_path, env=env, check=True).stdout
    )
    assert "plugged" in {row["name"] for row in listed}
    found = json.loads(gym("search", "plugins", "--json", cwd=tmp_path, env=env, check=True).stdout)
    assert found[0]["name"] == "plugged"


@pytest.mark.parametrize(
    ("query", "expected"), [("function calling", "bfcl"), ("code", "humaneval")]
)
def test_real_environments_rank_first(query: str, expected: str, tmp_path: Path) -> None:
    assert (SHIPPED / expected / "environment.yaml").exists()  # ranked among the shipped ones
    found = json.loads(gym_in_process("search", query, "--json", cwd=tmp_path, check=True).stdout)
    assert found[0]["name"] == expected, [hit["name"] for hit in found[:5]]
    assert found[0]["kind"] == "environment"
