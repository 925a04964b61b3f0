"""The study report and the trend page: self-contained HTML, like the run report."""

from __future__ import annotations

from pathlib import Path

from gymflow.history.catalog import CatalogEntry
from gymflow.reports.history_charts import Interval, forest_plot, trend_chart
from gymflow.reports.render import render
from gymflow.study.results import StudyResult, VariantEffect
from gymflow.written import write_text


def _tone(variant: VariantEffect) -> str:
    """The adjusted verdict's colour: a variant is coloured only when significant after the
    adjustment for the number of variants (its simultaneous interval then excludes 0)."""
    if not variant.significant or variant.difference is None:
        return ""
    return "pos" if variant.difference > 0 else "neg"


def write_study_report(out: Path, result: StudyResult) -> Path:
    rows = [Interval(v.summary.name, v.difference, v.ci95, _tone(v)) for v in result.variants]
    forest = forest_plot(rows, label=f"study {result.name}: differences from the baseline")
    write_text(out, render("study.html.j2", {"result": result, "forest": forest}))
    return out


def write_trend_report(out: Path, benchmark: str, root: Path, entries: list[CatalogEntry]) -> Path:
    points = [
        Interval(
            f"{e.created_at:%Y-%m-%d}" if e.created_at else e.run_id,
            e.pass1,
            (e.ci_low, e.ci_high) if e.ci_low is not None else None,
        )
        for e in entries
    ]
    chart = trend_chart(points, label=f"{benchmark}: pass@1 over time")
    data = {"benchmark": benchmark, "root": str(root), "entries": entries, "chart": chart}
    write_text(out, render("trend.html.j2", data))
    return out
