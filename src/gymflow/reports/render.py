"""Rendering the self-contained HTML report (autoescaped Jinja; no external resources)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from gymflow import __version__

_JINJA = Environment(
    loader=PackageLoader("gymflow.reports", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


_JINJA.filters["pct"] = _pct


def render_report(*, profile: dict[str, Any], health: dict[str, Any], run: dict[str, Any]) -> str:
    return _JINJA.get_template("report.html.j2").render(
        profile=profile, health=health, run=run, gymflow_version=__version__
    )


def write_report(path: Path, **sections: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(**sections), encoding="utf-8")
    return path
