"""A reverify of a NeMo Gym run asks the run's own resources server first (the `resources_url`
its stored config names) only where this machine sealed the store. Attack pass 6 (s21): a run
someone sent named the sender's server, which `reverify --check` then used as the judge of every
stored rollout ("6 agree", exit 0, for verdicts an honest server fails), before any seal was
checked; the writing reverify asked it too before refusing."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.conftest import gym
from tests.environments.test_nemo_gym_hostile import _folder, _recorded, _row
from tests.faults.stores import tree_digest
from tests.faults.test_attacks_nemo_gym import fake_app
from tests.faults.test_attacks_resources import serving


def test_a_run_someone_sent_does_not_choose_the_server_that_judges_it(
    tmp_path: Path, prefect_api: str
) -> None:
    _folder(tmp_path / "ng", [_row("ok")], [_recorded("ok", None, 1.0)])
    sender = {
        "GYMFLOW_NEMO_GYM_PATH": str(tmp_path / "ng"),
        "PREFECT_API_URL": prefect_api,
        "GYMFLOW_SEAL_KEY": secrets.token_hex(32),
    }
    asked: list[str] = []
    with serving(fake_app("1.0", asked)) as url:  # the sender's: every answer passes
        (tmp_path / "eval.yaml").write_text(
            f"environment: ng-fake\nrepeats: 2\nout: run\nresources_url: {url}\n"
        )
        ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, env=sender, timeout=600)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        asked.clear()
        before = tree_digest(tmp_path / "run")
        owner = {**sender, "GYMFLOW_SEAL_KEY": secrets.token_hex(32), "GYMFLOW_NEMO_GYM_VENV": ""}
        checked = gym("eval", "reverify", "run", "--check", cwd=tmp_path, env=owner, timeout=300)
        again = gym("eval", "reverify", "run", "--force", cwd=tmp_path, env=owner, timeout=300)
    # nothing asked of the sender's server; without it, the environment's own server judges
    # (here none can start: no NeMo Gym interpreter is given), and nothing is written
    assert asked == [], asked
    assert tree_digest(tmp_path / "run") == before
    for done in (checked, again):
        assert done.returncode == 1, done.stdout + done.stderr
        assert "NeMo Gym's own interpreter" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
