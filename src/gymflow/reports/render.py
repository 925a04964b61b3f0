"""Rendering the self-contained HTML report (autoescaped Jinja; no external resources).

The page carries its own stylesheet and one small table-sorting script; a Content-Security-Policy
allows exactly that script (by hash) and nothing from anywhere else, so even a rendering bug
could neither run injected script nor fetch a URL."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from jinja2 import BaseLoader, Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from gymflow import __version__
from gymflow.analysis.results import RunAnalysis, Seals
from gymflow.core.written import written
from gymflow.present import format_number, format_percent, format_points, format_value
from gymflow.reports import svg
from gymflow.reports.bytecode_cache import bytecode_cache
from gymflow.reports.sections import DEFAULT_LIMITS, Limits, report_analysis, run_sections

_TEMPLATES = files("gymflow.reports") / "templates"
_STYLE = (_TEMPLATES / "style.css").read_text(encoding="utf-8")
_SCRIPT = (_TEMPLATES / "table.js").read_text(encoding="utf-8")
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src 'sha256-{_SCRIPT_HASH}'; base-uri 'none'; form-action 'none'"
)


def environment(loader: BaseLoader, cache_folder: Path | None = None) -> Environment:
    """The report's Jinja environment over `loader`, its compiled templates cached between
    commands (in `cache_folder`, by default the user's cache: `reports.bytecode_cache`)."""
    # Bytecode depends on the options below as well as on each template's source (which Jinja
    # checks): entries are named by a digest of this module and of Jinja's version.
    variant = hashlib.sha256(Path(__file__).read_bytes() + jinja2.__version__.encode())
    env = Environment(
        loader=loader,
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=bytecode_cache(variant.hexdigest()[:16], cache_folder),
    )
    # The presentation layer's formatters, so a figure reads as it does in the CLI and the UI.
    env.filters.update(
        pct=format_percent, num=format_number, signed_pct=format_points, value=format_value
    )
    env.globals.update(svg=svg, outcomes=svg.OUTCOMES)
    return env


_JINJA = environment(PackageLoader("gymflow.reports", "templates"))


def render(template: str, data: dict[str, Any]) -> str:
    return _JINJA.get_template(template).render(
        **data,
        style=Markup(_STYLE),
        script=Markup(_SCRIPT),
        csp=CSP,
        gymflow_version=__version__,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def export_path(out: Path) -> Path:
    """Where the trajectories beyond the inline limit go: beside the report."""
    return out.with_name(out.stem + ".trajectories.jsonl")


def _write_export(partial: Path, name: str, rows: list[dict[str, Any]]) -> str:
    """Write the JSONL export to `partial` and return the relative link to `name`."""
    with partial.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    # "./" keeps a file name like "javascript:x" from being read as a URL scheme.
    return "./" + quote(name)


@dataclass(frozen=True, slots=True)
class WrittenReport:
    path: Path
    #: each store read whose seals fail (`analysis.seals`), named as the page names it ("A",
    #: "B", or the run folder), with what they say: the page states it beside the numbers
    edited: list[tuple[str, Seals]]


def write_report(
    run_dir: Path | str,
    *,
    out: Path | str | None = None,
    compare_dir: Path | str | None = None,
    verifier_version: str | None = None,
    analysis: RunAnalysis | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> WrittenReport:
    """Write `report.html` (or `out`) in the run directory from the run's `analysis` (the flow
    hands over the one it computed; without it, it is computed here, once) and the store's
    trajectories; with `compare_dir`, a comparison report of the two runs (`compare.html`).
    Nothing is written unless every section could be computed. A store whose seals fail is
    reported all the same, as profile prints it, with a banner saying so (`WrittenReport`)."""
    from gymflow.history.gate import load_verdict
    from gymflow.store.db import connect, store_path
    from gymflow.study.confirm import load_outcome

    name = "compare.html" if compare_dir is not None else "report.html"
    out_path = Path(out) if out else store_path(run_dir).parent / name
    if compare_dir is not None:
        from gymflow.reports.compare import compare_sections

        data = compare_sections(Path(run_dir), Path(compare_dir), limits=limits)
        template = "compare.html.j2"
        read = [
            (f"A ({run_dir})", data["a"]["profile"]),
            (f"B ({compare_dir})", data["b"]["profile"]),
        ]
    else:
        con = connect(run_dir, read_only=True)
        try:
            if analysis is None:
                analysis = report_analysis(con, verifier_version=verifier_version, limits=limits)
            data = run_sections(con, analysis, limits=limits)
        finally:
            con.close()
        template = "run.html.j2"
        read = [(str(run_dir), analysis.profile)]
        data["gate"] = load_verdict(store_path(run_dir).parent)
        data["confirmation"] = load_outcome(store_path(run_dir).parent, analysis.decision)
    rows, export = data.pop("export", []), export_path(out_path)
    # The report and its trajectories take their names together (gymflow.core.written); a stale
    # export goes once the report that no longer links it is in place.
    with written(out_path, *([export] if rows else [])) as partials:
        data["export_link"] = _write_export(partials[1], export.name, rows) if rows else None
        partials[0].write_text(render(template, data), encoding="utf-8")
    if not rows:
        export.unlink(missing_ok=True)
    edited = [
        (name, p.seals) for name, p in read if p.seals is not None and p.seals.intact is False
    ]
    return WrittenReport(out_path, edited)
