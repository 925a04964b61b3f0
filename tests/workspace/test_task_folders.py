"""Harbor task folders as a benchmark: read as Harbor reads them, versioned by their files, shown
by `gym list` and `gym search`, and checked by `gym env validate`, which names every task that is
broken or that the chosen sandbox cannot run, with the reason."""

from __future__ import annotations

import compileall
import json
import shutil
from pathlib import Path

import pytest

from gymflow.environments.workspace.harbor_task import (
    RewardProblem,
    TaskProblem,
    folder_hash,
    parse_reward,
    read_task,
)
from tests.conftest import gym, gym_in_process

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"


def _copy_task(name: str, into: Path) -> Path:
    target = into / name
    shutil.copytree(SHIPPED / name, target)
    return target


def test_task_toml_fields_and_defaults_are_harbors(tmp_path: Path) -> None:
    task = read_task(_copy_task("fix-median", tmp_path))
    assert task.config.verifier.timeout_sec == 60.0
    assert task.agent_timeout_s == 300.0
    assert (task.config.environment.cpus, task.config.environment.memory_mb) == (1, 1024)
    assert task.config.allow_internet is False
    (task.folder / "task.toml").write_text("[environment]\ncpus = 2\n")
    bare = read_task(task.folder)
    # Harbor's defaults: 600 s for the verifier, 2048 MB, and the internet allowed
    assert bare.config.verifier.timeout_sec == 600.0
    assert bare.config.environment.memory_mb == 2048
    assert bare.config.allow_internet is True


def test_version_is_a_hash_of_the_files(tmp_path: Path) -> None:
    folder = _copy_task("fix-median", tmp_path)
    before = folder_hash(folder)
    assert folder_hash(folder) == before
    # pip compiles every .py file it installs, a task's included; a check run by hand too
    compileall.compile_dir(folder, quiet=1)
    assert list(folder.rglob("__pycache__/*.pyc"))
    assert folder_hash(folder) == before
    (folder / "tests" / "check.py").write_text("raise SystemExit(0)\n")
    assert folder_hash(folder) != before


def test_a_broken_task_names_itself_and_the_file(tmp_path: Path) -> None:
    folder = _copy_task("fix-median", tmp_path)
    (folder / "tests" / "test.sh").unlink()
    (folder / "task.toml").write_text("[verifier]\ntimeout_sec = 'soon'\n")
    with pytest.raises(TaskProblem) as raised:
        read_task(folder)
    message = str(raised.value)
    assert "task 'fix-median'" in message
    assert "tests/test.sh: missing" in message
    assert "verifier.timeout_sec" in message


@pytest.mark.parametrize(
    ("txt", "js", "expected"),
    [
        (b"1\n", None, (1.0, {})),
        (b" 0.25 ", None, (0.25, {})),
        (None, b'{"reward": 0.5, "style": 1}', (0.5, {"style": 1.0})),
        (None, b'{"accuracy": 0.75}', (0.75, {})),
    ],
)
def test_reward_as_harbor_reads_it(txt, js, expected) -> None:
    assert parse_reward(txt, js) == expected


@pytest.mark.parametrize(
    ("txt", "js"),
    [(None, None), (b"pass", None), (b"nan", None), (None, b"[1]"), (None, b'{"a": 1, "b": 0}')],
)
def test_no_reward_is_no_zero(txt, js) -> None:
    with pytest.raises(RewardProblem):
        parse_reward(txt, js)


def _user_benchmark(tmp_path: Path) -> Path:
    """A user's folder: benchmarks/mine.yaml over tasks/, one valid task and three bad ones."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _copy_task("fix-median", tasks)
    no_test = _copy_task("csv-filter-sort", tasks)
    (no_test / "tests" / "test.sh").unlink()
    dockerfile = _copy_task("edit-env-file", tasks)
    (dockerfile / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /app\n")
    online = _copy_task("json-to-csv", tasks)
    toml = (online / "task.toml").read_text().replace("allow_internet = false", "")
    (online / "task.toml").write_text(toml)
    (tmp_path / "benchmarks").mkdir()
    benchmark = tmp_path / "benchmarks" / "mine.yaml"
    benchmark.write_text("name: mine\ndescription: my tasks\nworkspace: ../tasks\ntags: [mine]\n")
    (tmp_path / "eval.yaml").write_text(
        "benchmark: mine\nharness: {name: command, agent: oracle}\nout: runs/x\n"
    )
    return tmp_path


def test_validate_refuses_each_bad_task_naming_it(tmp_path: Path) -> None:
    folder = _user_benchmark(tmp_path)
    result = gym_in_process("env", "validate", "eval.yaml", "--json", cwd=folder,
                            env={"GYMFLOW_ENVIRONMENTS_PATH": str(folder)})  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    problems = "\n".join(json.loads(result.stdout)["problems"])
    assert "task 'csv-filter-sort'" in problems and "tests/test.sh: missing" in problems
    # fix the broken one: the sandbox's refusals are what is left, each named with its reason
    shutil.rmtree(folder / "tasks" / "csv-filter-sort")
    # a process: this one's registry read the folder before the task was removed
    result = gym("env", "validate", "eval.yaml", "--json", cwd=folder,
                 env={"GYMFLOW_ENVIRONMENTS_PATH": str(folder)})  # fmt: skip
    assert result.returncode == 1
    problems = json.loads(result.stdout)["problems"]
    assert len(problems) == 2, problems
    by_task = {p.split("task '")[1].split("'")[0]: p for p in problems}
    assert "Dockerfile" in by_task["edit-env-file"]
    assert "internet" in by_task["json-to-csv"]
    assert "bubblewrap" in by_task["json-to-csv"]
    assert not (folder / "runs").exists()  # validate writes nothing


def test_validate_passes_the_shipped_benchmark(tmp_path: Path) -> None:
    (tmp_path / "eval.yaml").write_text(
        "benchmark: workspace-basics\nharness: {name: command, agent: oracle}\nout: runs/x\n"
    )
    result = gym_in_process("env", "validate", "eval.yaml", "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert result.returncode == 0, report["problems"]
    assert any("24 workspace tasks valid" in line for line in report["passed"])


def test_list_and_search_show_workspace_benchmarks(tmp_path: Path) -> None:
    listed = gym_in_process("list", "benchmarks", "--json", cwd=tmp_path, check=True)
    names = {row["name"]: row for row in json.loads(listed.stdout)}
    assert names["workspace-basics"]["environment"] == "workspace-basics"
    assert "warning" not in listed.stderr, listed.stderr
    found = gym_in_process("search", "git", "--json", cwd=tmp_path, check=True)
    assert "workspace-basics" in [hit["name"] for hit in json.loads(found.stdout)]


def test_the_answer_key_and_its_checkout_are_hidden_from_sandboxes() -> None:
    from gymflow.environments.registry import load_environment

    hidden = load_environment("workspace-basics").hidden_paths()
    assert SHIPPED.resolve() in [path.resolve() for path in hidden]
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / ".git").exists():  # its history holds every solve.sh too
        assert checkout in [path.resolve() for path in hidden]


def test_a_users_workspace_benchmark_travels_with_its_tasks(tmp_path: Path, monkeypatch) -> None:
    """A worker without the user's folder resolves the same run (the same benchmark version,
    executable bits included) from the bundle the run packs."""
    import io
    import tarfile

    from gymflow.core.config import EvalConfig
    from gymflow.environments.registry import PATH_VARIABLE
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.travel import bundle_files, pack, unpacked_on_path

    mine = tmp_path / "mine"
    (mine / "tasks").mkdir(parents=True)
    _copy_task("fix-median", mine / "tasks")
    (mine / "benchmarks").mkdir()
    (mine / "benchmarks" / "mine.yaml").write_text("name: mine\nworkspace: ../tasks\n")
    monkeypatch.setenv(PATH_VARIABLE, str(mine))
    config = EvalConfig.model_validate(
        {"benchmark": "mine", "harness": {"name": "command", "agent": "oracle"}}
    )
    plan = resolve(config)
    files = bundle_files(plan)
    assert "data/tasks/fix-median/solution/solve.sh" in files
    worker = tmp_path / "worker"
    with tarfile.open(fileobj=io.BytesIO(pack(files))) as tar:
        tar.extractall(worker, filter="data")
    monkeypatch.delenv(PATH_VARIABLE)
    with unpacked_on_path(worker):
        there = resolve(config)
    assert there.benchmark_version == plan.benchmark_version
