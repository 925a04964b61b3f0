"""`gym server`: the recipe for a persistent Prefect server and workers, printed plainly."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import gym


def test_gym_server_prints_the_team_setup(tmp_path: Path) -> None:
    result = gym("server", cwd=tmp_path, check=True)
    for line in (
        "prefect server start",
        "PREFECT_API_URL=http://",
        "prefect work-pool create gymflow-process --type process",
        "prefect worker start --pool gymflow-process",
        "prefect --no-prompt deploy --all",
    ):
        assert line in result.stdout
