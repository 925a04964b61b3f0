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


def write_run_report(run_dir: Path, *, out: Path | None = None) -> Path:
    """Compute every section from the run's store and write `report.html` (or `out`)."""
    from gymflow.analysis.health import health
    from gymflow.analysis.profile import profile
    from gymflow.store.db import connect
    from gymflow.store.runs import run_info

    con = connect(run_dir, read_only=True)
    try:
        sections = {"profile": profile(con), "health": health(con), "run": run_info(con)}
    finally:
        con.close()
    return write_report(out or Path(run_dir) / "report.html", **sections)
