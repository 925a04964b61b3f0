"""The chat template as a factor gymflow owns (`model.kind: completions`), on a real server: the
Gemma 3 270M base checkpoint behind llama.cpp, started with llama-cpp-python's `gemma` chat format.

- gymflow's `gemma` rendering sent to /v1/completions gets, at temperature 0, the answers the
  server's own formatter gets on /v1/chat/completions: the same prompt, token for token.
- The decision on the chat run (the base checkpoint copies the prompt back: the chat format) runs
  its one-factor experiment, `gym eval decide --confirm`: the same tasks on the same server with
  only the template changed (plain text), each rollout completed, and the outcome measured, not
  assumed. (On this checkpoint it is not confirmed: the base model continues plain text too; an
  instruct checkpoint is the other half of the advice.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from tests.conftest import gym
from tests.real_model.conftest import GEMMA, run_spec, serve_llama
from tests.real_model.plans import Plan

PLAN = Plan("gemma-chat", "arithmetic-smoke", "chat", limit=8, max_output_tokens=64, model=GEMMA,
            server="gemma")  # fmt: skip


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_llama(tmp_path_factory.mktemp("gemma-server"), "gemma") as url:
        yield url


def _run(spec: dict[str, Any], name: str, cwd: Path, prefect_api: str) -> Path:
    spec = {**spec, "out": str(cwd / name)}
    (cwd / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    done = gym("eval", "run", f"{name}.yaml", cwd=cwd, env={"PREFECT_API_URL": prefect_api},
               timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return cwd / name


def _outputs(run: Path) -> dict[str, tuple[str, str]]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT task_id, status, output_text FROM rollouts").fetchall()
    finally:
        con.close()
    return {task: (status, text) for task, status, text in rows}


def test_gymflows_template_is_the_servers_and_the_experiment_runs(
    gemma_server: str, tmp_path: Path, prefect_api: str
) -> None:
    spec = run_spec(PLAN, gemma_server)
    chat = _run(spec, "chat", tmp_path, prefect_api)
    rendered = {**spec, "model": {**spec["model"], "kind": "completions", "chat_template": "gemma"}}
    text = _run(rendered, "text", tmp_path, prefect_api)
    by_server, by_gymflow = _outputs(chat), _outputs(text)
    assert len(by_server) == PLAN.limit
    assert all(status == "completed" for status, _ in by_server.values()), by_server
    assert by_gymflow == by_server

    decided = gym("eval", "decide", str(chat), "--confirm", "--json", cwd=tmp_path,
                  env={"PREFECT_API_URL": prefect_api}, timeout=1200)  # fmt: skip
    assert decided.returncode == 0, decided.stdout + decided.stderr
    result = json.loads(decided.stdout)
    assert result["decision"]["action"] == "chat_format", result["decision"]["why"]
    confirmation = result["confirmation"]
    experiment = confirmation["experiment"]
    assert experiment["change"] == {"model": {"kind": "completions", "chat_template": "plain"}}
    assert confirmation["ran"] and confirmation["after"] is not None
    rerun = Path(confirmation["run_dir"])
    if not rerun.is_absolute():
        rerun = tmp_path / rerun
    outputs = _outputs(rerun)
    assert set(outputs) == set(experiment["tasks"])
    assert all(status == "completed" for status, _ in outputs.values()), outputs
    con = duckdb.connect(str(rerun / "gymflow.duckdb"), read_only=True)
    try:
        (config,) = con.execute("SELECT config_json FROM runs").fetchone()
    finally:
        con.close()
    model = json.loads(config)["model"]
    # one factor: the template (and the endpoint kind it needs); the server and weights the same
    assert (model["kind"], model["chat_template"]) == ("completions", "plain")
    assert (model["base_url"], model["name"]) == (spec["model"]["base_url"], GEMMA)
