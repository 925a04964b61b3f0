"""Charts of many runs: a forest plot of a study's paired differences, and pass@1 over time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from gymflow.present import format_percent
from gymflow.reports.svg import Frame, el, svg


@dataclass(frozen=True, slots=True)
class Interval:
    label: str
    value: float | None
    ci95: tuple[float, float] | None
    #: css class of the marker: "pos", "neg" or "" (an interval that includes zero)
    tone: str = ""


def _pp(value: float) -> str:
    return f"{100 * value:+.0f}"


def forest_plot(rows: Sequence[Interval], *, label: str, width: float = 560) -> Markup:
    """One row per variant: its difference from the baseline with its 95% CI, around zero."""
    row_h, left, right, top = 26.0, 170.0, 24.0, 12.0
    height = top + row_h * max(len(rows), 1) + 30
    bounds = [b for r in rows if r.ci95 for b in r.ci95] + [
        r.value for r in rows if r.value is not None
    ]
    reach = max([abs(b) for b in bounds] + [0.05]) * 1.1
    frame = Frame(left, top, width - left - right, height - top - 30, -reach, reach)
    step = reach / 2
    ticks = [-2 * step, -step, 0.0, step, 2 * step]
    parts = [
        el("rect", x=left, y=top, width=frame.width, height=frame.height, class_="frame"),
        el("line", x1=frame.x(0), x2=frame.x(0), y1=top, y2=top + frame.height, class_="zero"),
    ]
    for t in ticks:
        parts.append(el("text", _pp(t), x=frame.x(t), y=height - 14, class_="tick mid"))
    parts.append(
        el("text", "difference from baseline, pp", x=left + frame.width / 2, y=height - 2,
           class_="tick mid")
    )  # fmt: skip
    for i, row in enumerate(rows):
        y = top + row_h * (i + 0.5)
        parts.append(el("text", row.label[:26], x=left - 6, y=y + 4, class_="tick end"))
        if row.ci95:
            low, high = row.ci95
            parts.append(el("line", x1=frame.x(low), x2=frame.x(high), y1=y, y2=y,
                            class_=f"whisker {row.tone}".strip()))  # fmt: skip
        if row.value is not None:
            text = f"{row.label}: {100 * row.value:+.1f} pp"
            if row.ci95:
                text += f" (95% CI {100 * row.ci95[0]:+.1f} to {100 * row.ci95[1]:+.1f})"
            parts.append(
                el("circle", el("title", text), cx=frame.x(row.value), cy=y, r=4.0,
                   class_=f"point {row.tone}".strip())
            )  # fmt: skip
    return svg(width, height, *parts, label=label)


def trend_chart(points: Sequence[Interval], *, label: str, width: float = 640) -> Markup:
    """pass@1 with its 95% CI band, one point per run in time order (labelled with its time,
    `gymflow.reports.history.time_labels`)."""
    height = 260.0
    count = max(len(points), 2)
    frame = Frame(44, 12, width - 60, height - 60, 0, count - 1)
    parts = [frame.axes([], (0.0, 0.25, 0.5, 0.75, 1.0), str, lambda t: f"{round(100 * t)}%")]
    band = [(i, p.ci95) for i, p in enumerate(points) if p.ci95]
    if band:
        upper = [(frame.x(i), frame.y(ci[1])) for i, ci in band]
        lower = [(frame.x(i), frame.y(ci[0])) for i, ci in band]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower[::-1])
        parts.append(el("polygon", points=coords, class_="band"))
    shown = [(i, p) for i, p in enumerate(points) if p.value is not None]
    if shown:
        coords = " ".join(f"{frame.x(i):.1f},{frame.y(p.value):.1f}" for i, p in shown)
        parts.append(el("polyline", points=coords, class_="at"))
    for i, p in shown:
        text = f"{p.label}: {format_percent(p.value)}"
        parts.append(el("circle", el("title", text), cx=frame.x(i), cy=frame.y(p.value), r=3.5,
                        class_=f"at {p.tone}".strip()))  # fmt: skip
    every = max(1, len(points) // 8)
    for i, p in enumerate(points):
        if i % every == 0:
            parts.append(el("text", p.label, x=frame.x(i), y=height - 30, class_="tick mid"))
    return svg(width, height, *parts, label=label)
