"""The shipped workspace tasks through `gym eval run`, as a user types it: every task passes under
the `oracle` agent (its solution/solve.sh) and none under `nothing`, each judged by its own
tests/test.sh in the bubblewrap sandbox."""

from __future__ import annotations

import compileall
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from gymflow.environments.registry import PATH_VARIABLE
from gymflow.environments.workspace.harbor_task import folder_hash
from tests.conftest import gym, require_tool

pytestmark = pytest.mark.slow

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"


def _run(
    tmp_path: Path,
    prefect_api: str,
    agent: str,
    benchmark: str = "workspace-basics",
    env: dict[str, str] | None = None,
) -> tuple[duckdb.DuckDBPyConnection, str]:
    require_tool("bwrap")
    (tmp_path / "eval.yaml").write_text(
        f"benchmark: {benchmark}\n"
        f"harness: {{name: command, agent: {agent}}}\n"
        f"out: runs/{agent}\n"
        "concurrency: 2\n"
    )
    result = gym("eval", "run", "eval.yaml", cwd=tmp_path, timeout=900,
                 env={"PREFECT_API_URL": prefect_api, **(env or {})})  # fmt: skip
    assert "Traceback" not in result.stderr, result.stderr
    store = tmp_path / "runs" / agent / "gymflow.duckdb"
    assert store.exists(), f"{result.stdout}\n{result.stderr}"
    return duckdb.connect(str(store), read_only=True), result.stdout


def _outcomes(con) -> dict[str, tuple]:
    rows = con.execute(
        "SELECT r.task_id, r.status, r.failure_kind, v.reward, v.passed "
        "FROM rollouts r LEFT JOIN verifications v USING (rollout_id)"
    ).fetchall()
    return {row[0]: row[1:] for row in rows}


def test_every_shipped_task_passes_under_the_oracle(tmp_path: Path, prefect_api: str) -> None:
    con, _ = _run(tmp_path, prefect_api, "oracle")
    outcomes = _outcomes(con)
    shipped = sorted(path.parent.name for path in SHIPPED.glob("*/task.toml"))
    assert len(shipped) >= 20
    assert sorted(outcomes) == shipped
    failing = {task: o for task, o in outcomes.items() if o != ("completed", None, 1.0, True)}
    assert not failing, failing
    harness, config = con.execute("SELECT harness, config_json FROM runs").fetchone()
    assert harness == "command"
    # the agent's package and version, a factor of the run, recorded with its config
    assert json.loads(config)["harness"]["agent_version"].startswith("gymflow ")


def test_no_shipped_task_passes_when_the_agent_does_nothing(
    tmp_path: Path, prefect_api: str
) -> None:
    con, _ = _run(tmp_path, prefect_api, "nothing")
    outcomes = _outcomes(con)
    assert len(outcomes) >= 20
    # each judged, and failing: the test script ran on the untouched workspace
    wrong = {task: o for task, o in outcomes.items() if o != ("completed", None, 0.0, False)}
    assert not wrong, wrong


def test_tasks_compiled_as_pip_installs_them_keep_their_version_and_pass(
    tmp_path: Path, prefect_api: str
) -> None:
    """pip compiles every .py file it installs: gymflow installed from a wheel ships each task
    with Python's bytecode caches beside its checks and its workspace's code. They are not the
    task: its version stays, and git-init-commit (whose check lists the files its commit holds)
    passes under the oracle, as fix-median (a package in its workspace) does."""
    mine = tmp_path / "mine"
    names = ("fix-median", "git-init-commit")
    for name in names:
        shutil.copytree(SHIPPED / name, mine / "tasks" / name)
    versions = [folder_hash(mine / "tasks" / name) for name in names]
    compileall.compile_dir(mine / "tasks", quiet=1)
    assert (mine / "tasks" / "git-init-commit" / "environment" / "__pycache__").is_dir()
    assert [folder_hash(mine / "tasks" / name) for name in names] == versions
    (mine / "benchmarks").mkdir()
    (mine / "benchmarks" / "mine.yaml").write_text("name: mine\nworkspace: ../tasks\n")
    con, _ = _run(tmp_path, prefect_api, "oracle", "mine", {PATH_VARIABLE: str(mine)})
    try:
        outcomes = _outcomes(con)
    finally:
        con.close()
    assert outcomes == dict.fromkeys(names, ("completed", None, 1.0, True)), outcomes
