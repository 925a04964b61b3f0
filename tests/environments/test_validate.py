"""`gym env validate`: every problem reported in one go, exit 0/1, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from gymflow.environments.registry import PATH_VARIABLE
from gymflow.environments.scaffold import scaffold
from gymflow.rollouts.validate import validate_config
from tests.conftest import gym_in_process as gym  # validate writes nothing: no process needed


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if "__pycache__" not in p.parts)


def test_valid_config_exits_zero(tmp_path: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: arithmetic-smoke\nrepeats: 2\nout: runs/x\n")
    result = gym("env", "validate", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid" in result.stdout
    assert "50 rows of arithmetic/smoke render" in result.stdout
    assert "resources server starts and answers /health" in result.stdout
    assert _files(tmp_path) == [config]  # no run directory, no store


def test_three_problems_are_all_reported(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "benchmark: arithmetic-smoke\n"
        "repeats: 0\n"  # schema
        "prompt_template: 'Solve {{ questoin }}'\n"  # every row fails to render
        "verifier_params: {extract: first_digit}\n"  # the verifier rejects it
    )
    result = gym("env", "validate", str(config), "--json", cwd=tmp_path)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    problems = report["problems"]
    assert len(problems) == 3, problems
    schema, verifier, rows = (
        next(p for p in problems if key in p) for key in ("repeats", "verifier_params", "questoin")
    )
    assert schema.startswith(f"{config}: repeats:")
    assert "extract" in verifier and "answer_line" in verifier
    # names the rows (with task ids), the undefined field and the file the template came from
    assert "row 0 (arith-00000)" in rows and "and 45 more rows" in rows
    assert "'questoin' is undefined" in rows and f"template from {config}" in rows
    assert _files(tmp_path) == [config]


def test_human_output_lists_every_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("benchmark: arithmetic-smoke\nconcurency: 8\nrepeats: -1\n")
    result = gym("env", "validate", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.count("FAIL") == 2
    assert "concurency: Extra inputs are not permitted" in result.stdout
    assert "2 problem(s)" in result.stdout


def test_unreadable_and_unknown_inputs(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("benchmark: [unclosed\n")
    report = validate_config(broken)
    assert not report.ok and "line 1" in report.problems[0]

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("benchmark: no-such-benchmark\n")
    report = validate_config(unknown)
    assert report.problems == [
        f"{unknown}: unknown benchmark 'no-such-benchmark' (known: "
        + report.problems[0].split("(known: ")[1]
    ]
    assert "arithmetic-smoke" in report.problems[0]

    missing = validate_config(tmp_path / "absent.yaml")
    assert "cannot read config" in missing.problems[0]


def test_resources_server_failure_and_bad_ping_are_reported(tmp_path: Path, monkeypatch) -> None:
    scaffold("crashy", tmp_path)
    env_py = tmp_path / "crashy" / "env.py"
    env_py.write_text(
        env_py.read_text().replace(
            'return {"notes": []}', 'raise RuntimeError("database unavailable")'
        )
    )
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    config = tmp_path / "eval.yaml"
    config.write_text(
        "benchmark: crashy-smoke\n"
        "model: {kind: responses, base_url: 'http://127.0.0.1:9/v1', max_retries: 0}\n"
    )
    report = validate_config(config, ping=True)
    assert len(report.problems) == 2, report.problems
    server, ping = report.problems
    assert "resources server of 'crashy' failed" in server and "database unavailable" in server
    assert ping.startswith("model: ping of 'gymflow-local-policy' at http://127.0.0.1:9/v1 failed")
    assert _files(tmp_path / "crashy") == sorted(
        [tmp_path / "crashy" / n for n in ("env.py", "environment.yaml", "eval.yaml")]
    )


def test_an_environment_whose_code_is_broken(tmp_path: Path, monkeypatch) -> None:
    scaffold("broken-code", tmp_path)
    env_py = tmp_path / "broken-code" / "env.py"
    env_py.write_text(env_py.read_text().replace("def make_task(index: int) -> Task:", "def ("))
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: broken-code-smoke\n")
    line = env_py.read_text().splitlines().index("def (") + 1
    report = validate_config(config)
    assert len(report.problems) == 1
    assert report.problems[0] == (
        f"{config}: environment of 'broken-code-smoke' does not load ({env_py}): "
        f"SyntaxError: invalid syntax (env.py, line {line})"
    )


def test_a_manifest_naming_an_unknown_verifier(tmp_path: Path, monkeypatch) -> None:
    scaffold("no-verifier", tmp_path)
    manifest = tmp_path / "no-verifier" / "environment.yaml"
    text = manifest.read_text()
    assert "verifier: {name: no-verifier_sum}" in text  # the scaffold's own verifier
    manifest.write_text(text.replace("{name: no-verifier_sum}", "{name: exact_vibes}"))
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    config = tmp_path / "eval.yaml"
    config.write_text("benchmark: no-verifier-smoke\n")
    report = validate_config(config)
    (problem,) = report.problems
    assert problem.startswith(f"{config}: verifier_params: unknown verifier 'exact_vibes' (known:")
