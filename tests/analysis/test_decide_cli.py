"""`gym eval decide RUN --confirm` as a user runs it: the decision's one-factor experiment run on
the affected tasks, its outcome, and the report showing hypothesis, prediction, evidence and
outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import gym, gym_in_process
from tests.real_model.plans import ENVS, FIXTURES
from tests.real_model.record import unpack


@pytest.mark.prefect  # `gym eval run` and the confirming experiment: flows on the suite's server
def test_confirm_raises_the_limit_on_the_cut_tasks_and_the_report_shows_it(
    tmp_path: Path, prefect_api: str
):
    config = {
        "benchmark": "arithmetic-smoke",
        "limit": 6,
        "repeats": 2,
        "sampling": {"temperature": 0.7, "top_p": 1.0, "max_output_tokens": 8, "seed": 0},
        "out": "run",
    }
    (tmp_path / "cut.yaml").write_text(yaml.safe_dump(config))
    env = {"PREFECT_API_URL": prefect_api}
    gym("eval", "run", "cut.yaml", cwd=tmp_path, env=env, timeout=600)
    out = gym("eval", "decide", "run", "--confirm", "--json", cwd=tmp_path, env=env, check=True)
    payload = json.loads(out.stdout)
    decision, outcome = payload["decision"], payload["confirmation"]
    assert decision["action"] == "harness_work", decision["why"]
    experiment = decision["experiment"]
    assert experiment["factor"] == "sampling.max_output_tokens" and experiment["kind"] == "rerun"
    assert experiment["change"] == {"sampling": {"max_output_tokens": 64}}
    assert len(experiment["tasks"]) == 6
    assert outcome["ran"] and outcome["effect"], outcome["why"]
    assert outcome["after"] > outcome["before"] and outcome["gained"] > 0
    rerun = tmp_path / outcome["run_dir"]  # as the user named the run: relative here
    assert rerun == tmp_path / "run" / "confirm" / "sampling.max_output_tokens"
    # the rerun is a run of its own, with the one factor changed
    profile = json.loads(gym("eval", "profile", str(rerun), "--json", cwd=tmp_path).stdout)
    assert profile["coverage"]["expected"] == 12
    gym("report", "run", cwd=tmp_path, check=True)
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Hypothesis: the serving stack or the harness failed" in page
    assert "Prediction on the stored rollouts" in page
    assert 'data-field="confirmation.effect" data-value="true"' in page
    assert "the predicted effect happened" in page
    text = gym("eval", "decide", "run", cwd=tmp_path, check=True).stdout
    assert "next action: harness work" in text and "margin: wins" in text


def test_confirm_reverifies_a_real_models_answers_without_a_model_call(tmp_path: Path):
    """SmolLM2's capitals, judged by regex_match in fullmatch mode: the lenient reading (the
    pattern anywhere) as a what-if reverify of a copy, no model server running."""
    run = unpack(FIXTURES / "scenario-verifier-fullmatch", tmp_path / "run")
    env = {"GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)}
    # a reverify of a copy, no Prefect flow: in-process
    out = gym_in_process("eval", "decide", str(run), "--confirm", "--json", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    decision, outcome = payload["decision"], payload["confirmation"]
    assert decision["action"] == "verifier_repair", decision["why"]
    assert decision["experiment"]["kind"] == "reverify"
    assert decision["experiment"]["change"]["verifier_params"]["mode"] == "search"
    assert outcome["ran"] and outcome["effect"], outcome["why"]
    assert outcome["run_dir"] == str(run / "confirm" / "verifier_params")
    # the run itself is read as before: the what-if lives in its copy
    again = gym_in_process("eval", "decide", str(run), "--json", cwd=tmp_path, env=env)
    again = json.loads(again.stdout)
    assert again["decision"]["action"] == "verifier_repair"
