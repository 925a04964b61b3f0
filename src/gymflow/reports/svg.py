"""Inline SVG charts drawn by gymflow itself: no chart library, no script, nothing fetched.

Every attribute value and every text node goes through `markupsafe.escape`, because labels
(task ids, failure kinds, tags) come from datasets, configs and models. The charts return
`Markup`, so the template inserts them without a `|safe` on untrusted data."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from gymflow.present import format_percent

# Outcome of one (task, repeat) cell. Failed and missing must look unlike a wrong answer.
OUTCOMES: dict[str, str] = {
    "P": "passed",
    "W": "wrong (scored, not passed)",
    "F": "failed rollout (model / harness)",
    "E": "verifier error or unverified",
    "M": "missing (no rollout stored)",
}


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def _attrs(attrs: dict[str, object]) -> str:
    parts = []
    for key, value in attrs.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        text = _num(value) if isinstance(value, float) else str(value)
        parts.append(f' {name}="{escape(text)}"')
    return "".join(parts)


def el(tag: str, *children: str | Markup, **attrs: object) -> Markup:
    """An element; plain-string children are escaped, Markup children are kept as they are."""
    inner = "".join(str(escape(child)) for child in children)
    return Markup(f"<{tag}{_attrs(attrs)}>{inner}</{tag}>")


def svg(width: float, height: float, *children: Markup, label: str) -> Markup:
    return el(
        "svg",
        el("title", label),
        *children,
        width=float(width),
        height=float(height),
        viewBox=f"0 0 {_num(width)} {_num(height)}",
        role="img",
        aria_label=label,
        class_="chart",
    )


@dataclass(frozen=True, slots=True)
class Frame:
    """A plot area inside an SVG: maps data coordinates to pixels."""

    left: float
    top: float
    width: float
    height: float
    x_min: float
    x_max: float
    y_min: float = 0.0
    y_max: float = 1.0

    def x(self, value: float) -> float:
        span = (self.x_max - self.x_min) or 1.0
        return self.left + (value - self.x_min) / span * self.width

    def y(self, value: float) -> float:
        span = (self.y_max - self.y_min) or 1.0
        return self.top + self.height - (value - self.y_min) / span * self.height

    def axes(self, x_ticks: Iterable[float], y_ticks: Iterable[float], x_fmt, y_fmt) -> Markup:
        parts = [
            el(
                "rect",
                x=float(self.left),
                y=float(self.top),
                width=float(self.width),
                height=float(self.height),
                class_="frame",
            )
        ]
        for t in y_ticks:
            y = self.y(t)
            parts.append(
                el("line", x1=self.left, x2=self.left + self.width, y1=y, y2=y, class_="grid")
            )
            parts.append(el("text", y_fmt(t), x=self.left - 4, y=y + 4, class_="tick end"))
        for t in x_ticks:
            x = self.x(t)
            parts.append(
                el("text", x_fmt(t), x=x, y=self.top + self.height + 14, class_="tick mid")
            )
        return Markup("").join(parts)


def k_curves(
    curves: Sequence[tuple[str, str, Sequence[float | None]]],
    *,
    band: Sequence[tuple[float, float] | None] | None = None,
    label: str,
    width: float = 380,
    height: float = 240,
) -> Markup:
    """Metric against k = 1..K: one polyline per (name, css class, values); optional CI band
    around the first curve."""
    count = max((len(values) for _, _, values in curves), default=0)
    frame = Frame(44, 12, width - 56, height - 44, 1, max(count, 2))
    parts = [
        frame.axes(
            _k_ticks(count),
            (0.0, 0.25, 0.5, 0.75, 1.0),
            lambda t: str(int(t)),
            lambda t: f"{round(100 * t)}%",
        ),
        el("text", "k", x=frame.left + frame.width / 2, y=height - 4, class_="tick mid"),
    ]
    if band and any(b is not None for b in band):
        upper = [(frame.x(k), frame.y(b[1])) for k, b in enumerate(band, 1) if b is not None]
        lower = [(frame.x(k), frame.y(b[0])) for k, b in enumerate(band, 1) if b is not None]
        points = " ".join(f"{_num(x)},{_num(y)}" for x, y in upper + lower[::-1])
        parts.append(el("polygon", points=points, class_="band"))
    for name, css, values in curves:
        pts = [(frame.x(k), frame.y(v), k, v) for k, v in enumerate(values, 1) if v is not None]
        if not pts:
            continue
        parts.append(
            el(
                "polyline",
                points=" ".join(f"{_num(x)},{_num(y)}" for x, y, _, _ in pts),
                class_=css,
            )
        )
        for x, y, k, v in pts:
            parts.append(
                el(
                    "circle",
                    el("title", f"{name} k={k}: {format_percent(v)}"),
                    cx=x,
                    cy=y,
                    r=3.0,
                    class_=css,
                )
            )
    return svg(width, height, *parts, label=label)


def _k_ticks(count: int) -> list[float]:
    if count <= 10:
        return [float(k) for k in range(1, count + 1)]
    step = max(1, count // 8)
    return [float(k) for k in range(1, count + 1, step)]


def outcome_grid(
    rows: Sequence[tuple[str, str]],
    *,
    repeats: int,
    label: str,
    per_repeat: bool = True,
    max_width: float = 900,
) -> Markup:
    """Tasks x repeats, coloured by outcome. `rows` are (task_id, codes) with one outcome code of
    `OUTCOMES` per repeat. With `per_repeat`, one cell per rollout; without, each task is one bar
    split by its outcome shares, so a run of any size stays a few rectangles per task. Tasks are
    tiled into columns to keep the picture compact; each task strip carries its own tooltip."""
    count = len(rows)
    cell = 14.0 if count <= 60 else 8.0 if count <= 400 else 5.0 if count <= 2000 else 3.0
    labelled = count <= 60
    label_w = 110.0 if labelled else 0.0
    bar_w = repeats * cell if per_repeat else 48.0
    strip_w = label_w + bar_w
    gap = max(cell, 4.0)
    per_col_max = 60 if labelled else 100
    columns = max(1, min(int((max_width + gap) // (strip_w + gap)), -(-count // per_col_max)))
    per_col = -(-count // columns) if rows else 0
    width = columns * strip_w + (columns - 1) * gap
    height = per_col * cell
    parts = []
    for i, (task_id, codes) in enumerate(rows):
        col, row = divmod(i, per_col)
        x0, y0 = col * (strip_w + gap), row * cell
        counts = {code: codes.count(code) for code in OUTCOMES if code in codes}
        summary = ", ".join(f"{n} {OUTCOMES[code].split(' ')[0]}" for code, n in counts.items())
        cells = [el("title", f"{task_id}: {summary}")]
        if labelled:
            cells.append(
                el(
                    "text",
                    _clip(task_id, 16),
                    x=x0 + label_w - 6,
                    y=y0 + cell - 3,
                    class_="tick end",
                )
            )
        if per_repeat:
            shapes = [(x0 + label_w + r * cell, cell - 1, code) for r, code in enumerate(codes)]
        else:
            shapes, x = [], x0 + label_w
            for code, n in counts.items():
                shapes.append((x, bar_w * n / len(codes), code))
                x += bar_w * n / len(codes)
        for x, w, code in shapes:
            cells.append(el("rect", x=x, y=y0, width=w, height=cell - 1, class_=f"o{code}"))
        parts.append(el("g", *cells))
    return svg(max(width, 1), max(height, 1), *parts, label=label)


def legend() -> Markup:
    items = []
    for i, (code, text) in enumerate(OUTCOMES.items()):
        y = i * 18
        items.append(el("rect", x=0.0, y=float(y), width=12.0, height=12.0, class_=f"o{code}"))
        items.append(el("text", text, x=18.0, y=float(y + 10), class_="tick"))
    return svg(260, 18 * len(OUTCOMES), *items, label="outcome legend")


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def bar_chart(
    bars: Sequence[tuple[str, int]], *, label: str, total: int | None = None, width: float = 640
) -> Markup:
    """Horizontal bars, largest first, each labelled with its count and share of `total`."""
    row_h, label_w = 22.0, 220.0
    top = max((count for _, count in bars), default=0) or 1
    height = row_h * len(bars) + 4
    parts = []
    for i, (name, count) in enumerate(bars):
        y = i * row_h + 2
        share = f" ({format_percent(count / total)})" if total else ""
        length = (width - label_w - 110) * count / top
        parts.append(
            el(
                "g",
                el("title", f"{name}: {count}{share}"),
                el("text", _clip(name, 34), x=label_w - 6, y=y + 14, class_="tick end"),
                el(
                    "rect",
                    x=label_w,
                    y=y + 2,
                    width=max(length, 1.0),
                    height=row_h - 6,
                    class_="bar",
                ),
                el("text", f"{count}{share}", x=label_w + length + 6, y=y + 14, class_="tick"),
            )
        )
    return svg(width, max(height, row_h), *parts, label=label)


def histogram(
    bins: Sequence[tuple[float, float, int]],
    *,
    label: str,
    unit: str = "",
    width: float = 300,
    height: float = 170,
) -> Markup:
    """Equal-width bins as (low, high, count)."""
    if not bins:
        return svg(width, 30, el("text", "no data", x=4.0, y=18.0, class_="tick"), label=label)
    lo, hi = bins[0][0], bins[-1][1]
    top = max(count for _, _, count in bins) or 1
    frame = Frame(40, 8, width - 52, height - 40, lo, hi if hi > lo else lo + 1, 0, top)
    parts = [
        frame.axes(
            (lo, hi),
            (0.0, float(top)),
            lambda t: _short(t) + unit,
            lambda t: str(int(t)),
        ),
        el("text", label, x=frame.left + frame.width / 2, y=height - 4, class_="tick mid"),
    ]
    for b_lo, b_hi, count in bins:
        if not count:
            continue
        x0, x1 = frame.x(b_lo), frame.x(b_hi)
        y = frame.y(count)
        parts.append(
            el(
                "rect",
                el("title", f"{_short(b_lo)}–{_short(b_hi)}{unit}: {count}"),
                x=x0,
                y=y,
                width=max(x1 - x0 - 1, 1.0),
                height=frame.y(0) - y,
                class_="bar",
            )
        )
    return svg(width, height, *parts, label=label)


def _short(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}"


def scatter(
    points: Sequence[tuple[float, float, str]],
    *,
    x_label: str,
    y_label: str,
    label: str,
    size: float = 340,
) -> Markup:
    """Per-task scores of two runs; identical points merge into one dot sized by their count."""
    merged: dict[tuple[float, float], list[str]] = {}
    for x, y, name in points:
        merged.setdefault((round(x, 4), round(y, 4)), []).append(name)
    frame = Frame(48, 10, size - 60, size - 52, 0, 1)
    ticks = (0.0, 0.5, 1.0)
    parts = [
        frame.axes(ticks, ticks, _pct_tick, _pct_tick),
        el("line", x1=frame.x(0), y1=frame.y(0), x2=frame.x(1), y2=frame.y(1), class_="diag"),
        el("text", x_label, x=frame.left + frame.width / 2, y=size - 6, class_="tick mid"),
        el(
            "text",
            y_label,
            x=12.0,
            y=frame.top + frame.height / 2,
            class_="tick mid",
            transform=f"rotate(-90 12 {_num(frame.top + frame.height / 2)})",
        ),
    ]
    for (x, y), names in sorted(merged.items()):
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        css = "dot up" if y > x else ("dot down" if y < x else "dot")
        parts.append(
            el(
                "circle",
                el(
                    "title",
                    f"{len(names)} task(s) at {format_percent(x)} → {format_percent(y)}: {shown}",
                ),
                cx=frame.x(x),
                cy=frame.y(y),
                r=min(3 + 1.5 * len(names) ** 0.5, 14),
                class_=css,
            )
        )
    return svg(size, size, *parts, label=label)


def _pct_tick(t: float) -> str:
    return f"{round(100 * t)}%"


def stacked_bar(parts: Sequence[tuple[str, str, int]], *, label: str, width: float = 220) -> Markup:
    """One bar split into (name, css class, count) segments: coverage at a glance."""
    total = sum(count for _, _, count in parts) or 1
    x, shapes = 0.0, []
    for name, css, count in parts:
        w = width * count / total
        if count:
            shapes.append(
                el(
                    "rect",
                    el("title", f"{name}: {count}"),
                    x=x,
                    y=0.0,
                    width=w,
                    height=12.0,
                    class_=css,
                )
            )
        x += w
    return svg(width, 12, *shapes, label=label)
