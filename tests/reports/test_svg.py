"""The report's charts: escaped, and bounded in size for large runs."""

from __future__ import annotations

from gymflow.reports import svg


def test_labels_are_escaped_in_text_and_attributes():
    chart = str(svg.bar_chart([('<script>x</script>"', 3)], label="a<b", total=3))
    assert "<script>" not in chart and "&lt;script&gt;" in chart
    assert 'aria-label="a&lt;b"' in chart


def test_outcome_grid_draws_one_cell_per_rollout_or_shares_per_task():
    rows = [("t1", "PWFEM"), ("t2", "PPPPP")]
    cells = str(svg.outcome_grid(rows, repeats=5, label="grid"))
    assert cells.count("<rect") == 10
    assert cells.count('class="oF"') == cells.count('class="oM"') == 1
    shares = str(svg.outcome_grid(rows, repeats=5, label="grid", per_repeat=False))
    assert shares.count("<rect") == 6  # five outcomes of t1, one of t2


def test_a_million_rollouts_draw_in_a_bounded_picture():
    rows = [(f"task-{i:05d}", "PW" * 50) for i in range(10_000)]
    chart = str(svg.outcome_grid(rows, repeats=100, label="grid", per_repeat=False))
    assert chart.count("<rect") == 20_000
    assert len(chart) < 2_500_000
