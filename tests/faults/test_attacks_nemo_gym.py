"""A NeMo Gym server (or a served resources server) answering `/verify` with a reward that is an
integer past a float's range: JSON has no bound on an integer's digits, and `math.isfinite`
raises OverflowError on it rather than answering False. That made each rollout a `harness_error`
failure (left out of scores) and a reverify a traceback; it is a `bad_reward`, as NaN is."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import FastAPI, Request, Response

from tests.conftest import gym
from tests.environments.test_nemo_gym_hostile import _folder, _recorded, _row
from tests.faults.stores import query
from tests.faults.test_attacks_resources import serving

HUGE = "1" + "0" * 400  # 1e400 as an integer: no float holds it


def fake_app(reward: str, asked: list[str] | None = None) -> FastAPI:
    """A NeMo Gym resources server answering every `/verify` with `reward` (JSON text); each
    reverify-mode and verify request is kept in `asked`, when given."""
    app = FastAPI()
    kept = asked if asked is not None else []

    @app.post("/seed_session")
    async def seed() -> dict:
        return {}

    @app.get("/reverify_mode")
    async def reverify_mode() -> str:
        kept.append("GET /reverify_mode")
        return "stateless"

    @app.post("/verify")
    async def verify(request: Request) -> Response:
        await request.body()
        kept.append("POST /verify")
        return Response(f'{{"reward": {reward}}}', media_type="application/json")

    return app


def _stored(run: Path) -> list[tuple]:
    return query(
        run / "gymflow.duckdb",
        "SELECT r.rollout_id, r.status, r.failure_kind, v.verifier_version, v.status, "
        "v.reward, v.passed, v.failure_kind FROM rollouts r "
        "LEFT JOIN verifications v USING (rollout_id) ORDER BY r.rollout_id",
    )


def test_a_reward_past_floats_range_is_a_bad_reward_never_a_dropped_rollout(
    tmp_path: Path, prefect_api: str
) -> None:
    _folder(tmp_path / "ng", [_row("ok")], [_recorded("ok", None, 1.0)])
    env = {"GYMFLOW_NEMO_GYM_PATH": str(tmp_path / "ng"), "PREFECT_API_URL": prefect_api}
    with serving(fake_app(HUGE)) as url:
        (tmp_path / "eval.yaml").write_text(
            f"environment: ng-fake\nrepeats: 2\nout: run\nresources_url: {url}\n"
        )
        ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, env=env, timeout=600)
        assert "Traceback" not in ran.stderr, ran.stderr
        before = _stored(tmp_path / "run")
        assert len(before) == 2
        for _, status, failure, _, v_status, reward, passed, v_kind in before:
            assert (status, failure, v_status, reward, passed, v_kind) == (
                "completed", None, "error", None, None, "bad_reward"
            )  # fmt: skip
        # judged again at the run's server: the same error, no traceback, nothing else changed
        again = gym("eval", "reverify", "run", "--json", cwd=tmp_path, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["status"] == "rejudged"
    assert _stored(tmp_path / "run") == before


def test_a_left_partial_of_the_servers_metrics_blocks_nothing(
    tmp_path: Path, prefect_api: str
) -> None:
    """The server's `/aggregate_metrics` answer was written through one fixed partial name
    (`nemo_gym_metrics.partial`): whatever a killed run left there (here a folder) ended the
    next run's metrics write. It is written aside as every file is (gymflow.core.written)."""
    _folder(tmp_path / "ng", [_row("ok")], [_recorded("ok", None, 1.0)])
    env = {"GYMFLOW_NEMO_GYM_PATH": str(tmp_path / "ng"), "PREFECT_API_URL": prefect_api}
    (tmp_path / "run" / "nemo_gym_metrics.partial").mkdir(parents=True)
    with serving(fake_app("1.0")) as url:
        (tmp_path / "eval.yaml").write_text(
            f"environment: ng-fake\nrepeats: 2\nout: run\nresources_url: {url}\n"
        )
        ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, env=env, timeout=600)
    assert "Traceback" not in ran.stderr, ran.stderr
    metrics = json.loads((tmp_path / "run" / "nemo_gym_metrics.json").read_text())
    assert metrics["rollouts"] == 2  # the fake has no /aggregate_metrics: its 404 is kept
    assert [row[4:7] for row in _stored(tmp_path / "run")] == [("ok", 1.0, True)] * 2
