"""Bounded YAML on every path: a 9-level "billion laughs" (under 400 bytes, 9**9 strings once
expanded) is refused in one line naming its file by `gym eval run` (as a config, and as a
benchmark file), by `gym list environments` (as an environment manifest) and by `gym eval
reverify --set`; nothing is written. No module reads YAML but through the one bounded loader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gymflow.cli import exit_codes
from tests.conftest import ROOT, gym, gym_in_process
from tests.faults.stores import collect_run, copied_run, one_error_line, tree_digest


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-rollout run, a copy of which each reverify below is refused on."""
    return collect_run(tmp_path_factory.mktemp("small") / "run", limit=2, repeats=1)


def laughs(levels: int = 9) -> str:
    """A flow-style YAML list whose every level repeats the one before nine times."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi"[: levels - 1], strict=False):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_alias_bombs_are_refused_on_every_yaml_path(tmp_path: Path):
    config = tmp_path / "bomb.yaml"
    config.write_text(laughs() + "benchmark: arithmetic-smoke\n")
    assert len(config.read_bytes()) < 538
    run = gym("eval", "run", str(config), cwd=tmp_path, timeout=60)
    assert run.returncode == exit_codes.BAD_INPUT
    assert f"{config}: refused: aliases expand it" in one_error_line(run.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.yaml"]  # no run folder

    envs = tmp_path / "envs"
    (envs / "benchmarks").mkdir(parents=True)
    benchmark = envs / "benchmarks" / "laughs.yaml"
    benchmark.write_text(laughs() + "environment: arithmetic\n")
    env = {"GYMFLOW_ENVIRONMENTS_PATH": str(envs)}
    refused = gym("eval", "run", "--benchmark", "laughs", cwd=tmp_path, env=env, timeout=60)
    assert refused.returncode == exit_codes.BAD_INPUT
    line = one_error_line(refused.stderr)
    assert str(benchmark) in line and "aliases expand it" in line

    (envs / "bombenv").mkdir()
    manifest = envs / "bombenv" / "environment.yaml"
    manifest.write_text(laughs() + "name: bombenv\n")
    listed = gym("list", "environments", cwd=tmp_path, env=env, timeout=60)
    assert listed.returncode == exit_codes.BAD_INPUT
    line = one_error_line(listed.stderr)
    assert str(manifest) in line and "aliases expand it" in line


def test_a_bomb_in_a_reverify_value_changes_nothing(small: Path, tmp_path: Path):
    run = copied_run(small, tmp_path / "run")
    before = tree_digest(run)
    levels = [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    value = f"[&l0 [1,1,1,1,1,1,1,1,1], {', '.join(levels)}]"
    refused = gym("eval", "reverify", str(run), "--set", f"tolerance={value}", cwd=tmp_path)
    assert refused.returncode == exit_codes.BAD_INPUT
    assert "aliases expand it" in one_error_line(refused.stderr)
    assert tree_digest(run) == before


#: Files that read YAML but never run as gymflow: NeMo Gym's interpreter runs serve_app.py, which
#: imports nothing of gymflow, on the server's own config, as NeMo Gym itself reads it.
OUTSIDE_GYMFLOW = {"src/gymflow/environments/nemo_gym/serve_app.py"}


def test_no_module_reads_yaml_but_through_the_bounded_loader():
    unbounded = re.compile(r"(?<!\w)yaml\.(safe_|full_|unsafe_)?load(_all)?\(")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "gymflow").rglob("*.py")
        if path.name != "bounded_yaml.py" and unbounded.search(path.read_text())
    ]
    for outside in OUTSIDE_GYMFLOW:
        assert "import gymflow" not in (ROOT / outside).read_text()
        assert "from gymflow" not in (ROOT / outside).read_text()
    assert [path for path in offenders if path not in OUTSIDE_GYMFLOW] == []


LONG = "9" * 5000


def test_an_integer_too_long_to_convert_is_one_error_naming_its_field(small: Path, tmp_path: Path):
    """Python refuses to convert past 4,300 digits, inside the YAML loader: `gym env validate`
    and `gym eval reverify --set` ended in a ValueError traceback, exit 3."""
    config = tmp_path / "long.yaml"
    config.write_text(f"benchmark: arithmetic-smoke\nseed: {LONG}\n")
    # in-process: a long integer expands nothing (the bombs above stay processes, whose
    # timeout and memory a regression would exhaust, not this one's)
    validated = gym_in_process("env", "validate", str(config), cwd=tmp_path)
    assert validated.returncode == exit_codes.BAD_INPUT, validated.stderr
    assert "Traceback" not in validated.stdout + validated.stderr
    shown = " ".join(validated.stdout.split())
    assert "field 'seed', line 2: an integer of 5000 characters (at most 1000)" in shown

    run = copied_run(small, tmp_path / "run")
    before = tree_digest(run)
    refused = gym_in_process("eval", "reverify", str(run), "--set", f"abs_tol={LONG}", cwd=tmp_path)
    assert refused.returncode == exit_codes.BAD_INPUT
    line = one_error_line(refused.stderr)
    assert line == "error: --set abs_tol: line 1: an integer of 5000 characters (at most 1000)"
    assert tree_digest(run) == before
