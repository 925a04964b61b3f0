"""A NeMo Gym judge server scored by a real judge (issue 44): the judge the user configures
(`verifier_params.judge`), reached through gymflow's model client, each call kept with the
verdict; no judge configured is refused at validate, naming the setting. The judge here is
gymflow's simulated model served over HTTP (`gym serve model`); tests/real_model runs the same
with SmolLM2 on llama.cpp's server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from gymflow.simulated.local_server import free_port
from tests.conftest import GYM, gym
from tests.servers import serving

VENV = Path(os.environ.get("GYMFLOW_NEMO_GYM_VENV", "/tmp/nemo-gym-venv"))


@pytest.fixture(scope="module")
def nemo_env() -> dict[str, str]:
    if not (VENV / "bin" / "python").exists():
        if os.environ.get("CI"):
            pytest.fail(f"{VENV} missing: .ci/run installs nemo-gym==0.4.0 there")
        pytest.skip(f"no NeMo Gym venv at {VENV}")
    site = next(VENV.glob("lib/python3*/site-packages"))
    return {"GYMFLOW_NEMO_GYM_PATH": str(site), "GYMFLOW_NEMO_GYM_VENV": str(VENV)}


def test_a_judge_server_without_a_judge_is_refused_at_validate(nemo_env, tmp_path: Path) -> None:
    (tmp_path / "eval.yaml").write_text("environment: ng-equivalence_llm_judge\nlimit: 1\n")
    done = gym("env", "validate", "eval.yaml", cwd=tmp_path, env=nemo_env)
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "asks a judge model" in said and "verifier_params.judge" in said
    assert "judge_model_server: policy_model" in said


def judged_run(tmp_path: Path, env: dict[str, str], judge: dict, name: str) -> list[tuple]:
    """`gym eval run` of a judge environment with `judge`; each verdict with its judge calls."""
    config = {"environment": name, "limit": 2, "repeats": 1, "out": "run",
              "verifier_params": {"judge": judge}}  # fmt: skip
    (tmp_path / "eval.yaml").write_text(json.dumps(config))
    ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, env=env, timeout=900)
    assert ran.returncode in (0, 2), ran.stdout + ran.stderr
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        (params,) = con.execute("SELECT params_json FROM verifier_versions").fetchone()
        assert json.loads(params)["judge"]["model"] == judge["model"]  # versioned with it
        return con.execute(
            "SELECT v.status, v.reward, v.details_json FROM verifications v"
        ).fetchall()
    finally:
        con.close()


def test_the_simulated_model_as_judge(nemo_env, prefect_api: str, tmp_path: Path) -> None:
    port = free_port()
    env = {**nemo_env, "PREFECT_API_URL": prefect_api}
    command = [GYM, "serve", "model",
               "--port", str(port), "--environment", "arithmetic"]  # fmt: skip
    with serving(command, f"http://127.0.0.1:{port}/health", tmp_path / "judge.log"):
        judge = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "simulated-judge"}
        verdicts = judged_run(tmp_path, env, judge, "ng-equivalence_llm_judge")
    assert len(verdicts) == 2
    for status, reward, details_json in verdicts:
        details = json.loads(details_json)
        assert status == "ok", details
        calls = details["judge_calls"]
        assert calls and all(c["status"] == "ok" and c["judge"] == "simulated-judge" for c in calls)
        # the server's own judge prompt went to the judge, and its answer came back
        prompt = json.dumps(calls[0]["request"]["input"])
        assert "[[A=B]]" in prompt and calls[0]["text"]
        # the simulated model does not say [[A=B]]: the server's verdict is 0, not a mock's 1
        assert reward == 0.0
