"""Nothing under a run folder is imported as code (issue 42 item 3; attack pass 4, a08).

`gym data select RUN` writes the selection into RUN/data/benchmarks/ and printed
`GYMFLOW_ENVIRONMENTS_PATH=RUN/data gym eval run --benchmark selection`. On that path every
RUN/data/*/environment.yaml is an environment whose module is imported: someone who can write
the run folder (no key) added RUN/data/pwn/ (arithmetic's manifest renamed, an env.py of theirs)
and pointed selection.yaml at it, and the owner's pasted command ran their Python as the owner
(it read the seal key). The selection now goes on `GYMFLOW_BENCHMARKS_PATH`, searched for
benchmark files only; a run's bundle (what travels to its workers) keeps the benchmark's data
off the worker's environments path too, and refuses a link among it."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from gymflow.cli.app import console
from gymflow.core.config import ConfigError, EvalConfig
from gymflow.environments.registry import (
    BENCHMARKS_VARIABLE,
    PATH_VARIABLE,
    environment_sources,
    load_environment,
)
from gymflow.environments.workspace.environment import WorkspaceEnvironment
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.travel import bundle_files, pack, unpacked_on_path
from gymflow.store.seal_key import key_file
from tests.conftest import gym
from tests.faults.stores import collect_run, rollout_rows, run_gym, tree_digest

BUILTIN = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin"


def _plant_environment(folder: Path, name: str, marker: Path) -> None:
    """An environment folder whose module, once imported, writes `marker` (the attacker's
    stand-in for reading the seal key) and is arithmetic otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = yaml.safe_load((BUILTIN / "arithmetic" / "environment.yaml").read_text())
    manifest.update(name=name, entrypoint="env:Pwn")
    (folder / "environment.yaml").write_text(yaml.safe_dump(manifest))
    (folder / "env.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran as the owner')\n"
        "from gymflow.builtin.arithmetic.env import ArithmeticEnvironment as Pwn\n"
    )


def test_the_printed_selection_command_imports_nothing_from_the_run_folder(
    tmp_path: Path, prefect_api: str
) -> None:
    run = collect_run(tmp_path / "run")
    selected = gym("data", "select", str(run), "--pass-rate", "[0,1]", cwd=tmp_path)
    assert selected.returncode == 0, selected.stdout + selected.stderr
    (line,) = [line for line in selected.stdout.splitlines() if "gym eval run" in line]
    assignment, program, *command = shlex.split(line)
    variable, folder = assignment.split("=", 1)
    # was: GYMFLOW_ENVIRONMENTS_PATH=RUN/data
    assert (variable, folder, program) == (BENCHMARKS_VARIABLE, str(run / "data"), "gym"), line

    # the attacker: an environment of theirs beside the selection, and the selection naming it
    marker = tmp_path / "pwned"
    _plant_environment(run / "data" / "pwn", "pwn", marker)
    benchmark = run / "data" / "benchmarks" / "selection.yaml"
    benchmark.write_text("name: selection\nenvironment: pwn\nsplit: smoke\nrepeats: 1\n")
    # control: on the environments path (the command printed before) the module runs
    control = gym("env", "validate", str(benchmark), cwd=tmp_path, env={PATH_VARIABLE: folder})
    assert marker.read_text() == "ran as the owner", control.stdout + control.stderr
    marker.unlink()
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)

    # the owner pastes the printed command
    again = tmp_path / "again"
    ran = run_gym(*command, "--limit", "2", "--out", str(again), cwd=tmp_path,
                  prefect_api=prefect_api, env={variable: folder})  # fmt: skip
    assert ran.returncode != 0, ran.stdout + ran.stderr
    # the data path's allow-list refuses the name before any lookup (once: unknown there)
    said = " ".join((ran.stdout + ran.stderr).split())
    assert "environment: 'pwn' is not an environment a data file may choose" in said, said
    assert not marker.exists()
    assert not (again / "gymflow.duckdb").exists()
    # `gym env validate` on the selection file reads it as data too
    checked = gym("env", "validate", str(benchmark), cwd=tmp_path)
    assert checked.returncode == 1 and "pwn" in checked.stdout, checked.stdout + checked.stderr
    assert f"{BENCHMARKS_VARIABLE}={run / 'data'}" in " ".join(checked.stdout.split())
    assert not marker.exists()
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def _workspace_selection(data: Path, marker: Path) -> EvalConfig:
    """A workspace benchmark in a run's data folder whose task folder is also, to the old
    bundle layout, an environment folder of the same name (manifest and env.py beside the task)."""
    shutil.copytree(BUILTIN / "workspace" / "fix-median", data / "pwn" / "fix-median")
    _plant_environment(data / "pwn", "pwn", marker)
    (data / "benchmarks").mkdir(parents=True)
    (data / "benchmarks" / "pwn.yaml").write_text("name: pwn\nworkspace: ../pwn\n")
    return EvalConfig.model_validate(
        {"benchmark": "pwn", "harness": {"name": "command", "agent": "oracle"}}
    )


def test_a_run_folders_files_travel_to_workers_as_data_never_as_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle once put everything it carried on the worker's environments path: a task
    folder holding an environment.yaml named as the benchmark was the worker's environment, its
    module imported in every shard and aggregate."""
    marker, data = tmp_path / "pwned", tmp_path / "run" / "data"
    config = _workspace_selection(data, marker)
    monkeypatch.setenv(BENCHMARKS_VARIABLE, str(data))
    monkeypatch.delenv(PATH_VARIABLE, raising=False)
    plan = resolve(config)
    assert isinstance(plan.env, WorkspaceEnvironment) and not marker.exists()
    files = bundle_files(plan)
    assert "data/pwn/env.py" in files and "data/benchmarks/pwn.yaml" in files
    assert not [name for name in files if not name.startswith("data/")]

    worker = tmp_path / "worker"
    with tarfile.open(fileobj=io.BytesIO(pack(files))) as tar:
        tar.extractall(worker, filter="data")
    monkeypatch.delenv(BENCHMARKS_VARIABLE)
    with unpacked_on_path(worker):
        there = resolve(config)
        assert "pwn" not in environment_sources()
        assert isinstance(load_environment("pwn"), WorkspaceEnvironment)
    assert there.benchmark_version == plan.benchmark_version
    assert not marker.exists()


def test_a_link_among_a_benchmarks_data_is_refused_not_packed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted beside the run folder's task folders (to the seal key; a link inside a
    task folder is refused by the task's reader already) would have been read and uploaded to
    the shard root with the bundle."""
    data = tmp_path / "run" / "data"
    config = _workspace_selection(data, tmp_path / "pwned")
    link = data / "pwn" / "notes.txt"
    link.symlink_to(key_file())
    monkeypatch.setenv(BENCHMARKS_VARIABLE, str(data))
    plan = resolve(config)
    with pytest.raises(ConfigError, match="a symlink") as refused:
        bundle_files(plan)
    assert str(link) in str(refused.value)


def _code_exec_selection(benchmarks: Path, marker: Path) -> None:
    """The attacker's edit of a selection (attack pass 7, s01): a code_exec benchmark over rows
    whose tests, once loaded, write `marker` (their stand-in for reading the seal key)."""
    test = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran as the owner')\n"
    row = {
        "prompt": 'def f():\n    """Return 1."""\n',
        "test": test + "def check(candidate):\n    pass\n",
        "entry_point": "f",
        "responses_create_params": {"input": [{"role": "user", "content": "write f"}]},
        "_gymflow": {"task_id": "t0", "reference": "return 1"},
    }
    (benchmarks / "selection.jsonl").write_text(json.dumps(row) + "\n")
    (benchmarks / "selection.yaml").write_text(
        "name: selection\ndataset:\n  path: selection.jsonl\n  format: nemo_gym\n  fields:\n"
        "    id: _gymflow.task_id\n    reference: _gymflow.reference\n"
        "    verifier: [prompt, test, entry_point]\nverifier:\n  name: code_exec\nrepeats: 1\n"
    )


def test_a_selection_made_code_exec_in_the_run_folder_runs_nothing(
    tmp_path: Path, prefect_api: str
) -> None:
    """A benchmark on the data path chooses a verifier only among those that treat rows as
    data (not one that loads them as code in gymflow's process, nor one that calls a server):
    the owner's pasted command is refused, naming the file and the field; the same folder on
    the environments path (the owner's explicit trust) runs it."""
    run = collect_run(tmp_path / "run")
    selected = gym("data", "select", str(run), "--pass-rate", "[0,1]", cwd=tmp_path)
    (line,) = [line for line in selected.stdout.splitlines() if "gym eval run" in line]
    assignment, _, *command = shlex.split(line)
    variable, folder = assignment.split("=", 1)
    marker = tmp_path / "pwned"
    _code_exec_selection(run / "data" / "benchmarks", marker)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)

    again = tmp_path / "again"
    ran = run_gym(*command, "--out", str(again), cwd=tmp_path, prefect_api=prefect_api,
                  env={variable: folder})  # fmt: skip
    out = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode != 0 and not marker.exists(), out
    assert "selection.yaml: verifier.name: 'code_exec' is not a verifier" in out, out
    assert not (again / "gymflow.duckdb").exists()
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest

    # a judge, which calls a server the file names: refused the same way, before any call
    judged = (
        (run / "data" / "benchmarks" / "selection.yaml")
        .read_text()
        .replace(
            "  name: code_exec\n",
            "  name: math_judge\n  params: {judge: {base_url: 'http://127.0.0.1:9/v1', "
            "api_key_env: OPENAI_API_KEY}}\n",
        )
    )
    (run / "data" / "benchmarks" / "selection.yaml").write_text(judged)
    ran = gym("env", "validate", str(run / "data" / "benchmarks" / "selection.yaml"), cwd=tmp_path)
    assert "verifier.name: 'math_judge' is not a verifier" in " ".join(ran.stdout.split())


def test_select_says_how_to_trust_a_selection_that_runs_code(tmp_path: Path) -> None:
    """`gym data select` of a run whose verifier loads its tests as code prints no command to
    paste: it says what the file chooses and how the owner trusts it."""
    from gymflow.cli.data import _print_how_to_evaluate

    benchmarks = tmp_path / "data" / "benchmarks"
    benchmarks.mkdir(parents=True)
    _code_exec_selection(benchmarks, tmp_path / "pwned")
    with console.capture() as captured:
        _print_how_to_evaluate(benchmarks / "selection.yaml", "selection")
    printed = " ".join(captured.get().split())
    assert "gym eval run" not in printed and PATH_VARIABLE in printed, printed
    assert "'code_exec' is not a verifier a data file may choose" in printed, printed
    assert not (tmp_path / "pwned").exists()
