"""The report's training-data section: the informative count, the histogram and the
near-duplicate groups of a run whose pass rates and prompts are known."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import gym
from tests.data.test_profile import run  # noqa: F401  (the fixture)


def _field(html: str, name: str) -> str:
    match = re.search(rf'data-field="{re.escape(name)}" data-value="([^"]*)"', html)
    assert match, name
    return match.group(1)


def test_report_shows_the_training_data_profile(run: Path) -> None:  # noqa: F811
    result = gym("report", str(run), cwd=run.parent)
    assert result.returncode == 0, result.stderr
    html = (run / "report.html").read_text()
    section = html[html.index('id="training-data"') : html.index('id="distributions"')]
    assert _field(section, "data.informative") == "2"
    # of the tasks with a score (issue 30): the missing task is neither informative nor not
    assert "of the 4 tasks with a score (50.0%; 5 tasks in all) are informative" in section
    assert "with the default band keeps 2" in section
    assert "tag <code>word</code></td><td>4</td><td>33.3%</td>" in section  # 1 of 3 scored
    # the two prompts that normalise to one text form the only group at the default 0.8
    assert _field(section, "data.near_duplicate_groups") == "1"
    assert "2 tasks, similarity 1, pass rates 100% · 0%" in section
    assert "<code>apples-copy</code></td><td>0 / 4</td>" in section
