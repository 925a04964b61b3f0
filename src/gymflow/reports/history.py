"""The study report and the trend page: self-contained HTML, like the run report."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from gymflow.core.written import write_text
from gymflow.history.catalog import CatalogEntry
from gymflow.reports.history_charts import Interval, forest_plot, trend_chart
from gymflow.reports.render import render
from gymflow.study.results import StudyResult, VariantEffect


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


#: Time labels from coarse to fine: a trend's points take the first that tells them apart.
TIME_FORMATS = ("%Y-%m-%d", "%m-%d %H:%M", "%m-%d %H:%M:%S", "%H:%M:%S.%f")


def time_labels(times: list[datetime | None]) -> list[str]:
    """One label per run: the date, or the date and time when two runs share a date (a day's
    runs all read the same date otherwise); an unknown time is `?`."""
    known = [t for t in times if t is not None]
    for fmt in TIME_FORMATS:
        if len({f"{t:{fmt}}" for t in known}) == len(set(known)):
            break
    return [f"{t:{fmt}}" if t is not None else "?" for t in times]


def write_trend_report(
    out: Path,
    benchmark: str,
    root: Path,
    entries: list[CatalogEntry],
    mixed: dict[str, list[str]],
) -> Path:
    """The trend page; `mixed` names the policy factors its runs do not share
    (`gymflow.history.catalog.mixed_factors`), stated above the chart."""
    labels = time_labels([e.created_at for e in entries])
    points = [
        Interval(label, e.pass1, (e.ci_low, e.ci_high) if e.ci_low is not None else None)
        for label, e in zip(labels, entries, strict=True)
    ]
    chart = trend_chart(points, label=f"{benchmark}: pass@1 over time")
    data = {
        "benchmark": benchmark,
        "root": str(root),
        "entries": entries,
        "chart": chart,
        "mixed": mixed,
    }
    write_text(out, render("trend.html.j2", data))
    return out
