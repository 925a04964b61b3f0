"""`temperature: null` / `top_p: null`: not sent at all, for models that refuse a request naming
them (OpenAI's reasoning models answer 400 to either, which made every call a client_error), and
recorded as not sent: the run's sampling says null, and no call is flagged as differing."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests.conftest import gym

CONFIG = """\
benchmark: arithmetic-smoke
limit: 5
repeats: 2
sampling: {temperature: null, top_p: null, max_output_tokens: 64, seed: 0}
out: run
"""


def test_null_sampling_settings_are_not_sent(tmp_path: Path, prefect_api: str) -> None:
    (tmp_path / "eval.yaml").write_text(CONFIG)
    run = gym("eval", "run", "eval.yaml", cwd=tmp_path, env={"PREFECT_API_URL": prefect_api})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "health: healthy" in run.stdout
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT request_json FROM model_calls").fetchall()
        requests = [json.loads(r) for (r,) in rows]
        (sampling,) = con.execute("SELECT sampling_json FROM runs").fetchone()
    finally:
        con.close()
    assert len(requests) == 10
    for request in requests:
        assert "temperature" not in request and "top_p" not in request, request
        assert request["max_output_tokens"] == 64
    assert json.loads(sampling)["temperature"] is None and json.loads(sampling)["top_p"] is None
