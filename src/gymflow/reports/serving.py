"""Reports over HTTP: where a report is published (its URL under a configured base), and the
small read-only server behind `gym serve reports`.

A browser refuses `file://` links from a web page (the Prefect UI), and with several workers a
report sits on whichever machine ran the flow; a server over the folder the runs write into makes
the report one click away. Only report files are served (no stores, no configs): regular files named
as reports, reached from the root without a symlink on the way (a `.html` link to the run's
`gymflow.duckdb` served the store), with the reports' own Content-Security-Policy as a header."""

from __future__ import annotations

import html
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from gymflow.reports.render import CSP

#: Base URL of a `gym serve reports` server, e.g. http://reports.internal:8200
REPORTS_URL_ENV = "GYMFLOW_REPORTS_URL"
#: The folder that server serves, as this machine sees it (default: the working directory).
REPORTS_ROOT_ENV = "GYMFLOW_REPORTS_ROOT"
#: What is served: the reports and the trajectories file beside a large one.
SERVED_SUFFIXES = (".html", ".jsonl")
#: Reports listed on the index page, newest first.
INDEX_LIMIT = 500


@dataclass(frozen=True)
class ReportLink:
    """Where a report can be opened: `url` when a reports server covers it, else None and
    `note` says why and what to set."""

    path: str
    url: str | None
    note: str


def report_link(report: Path | str, environ: dict[str, str] | None = None) -> ReportLink:
    """The report's URL under GYMFLOW_REPORTS_URL, relative to GYMFLOW_REPORTS_ROOT."""
    env = os.environ if environ is None else environ
    path = Path(report).resolve()
    base = env.get(REPORTS_URL_ENV, "").strip().rstrip("/")
    root = Path(env.get(REPORTS_ROOT_ENV) or Path.cwd()).resolve()
    if not base:
        return ReportLink(
            str(path),
            None,
            f"{REPORTS_URL_ENV} is not set, so the report is only a file on the machine that ran "
            f"the flow (a browser will not open file:// links from the Prefect UI). Serve it with "
            f"`gym serve reports --root {root}` and set {REPORTS_URL_ENV} to that server's URL.",
        )
    if not path.is_relative_to(root):
        return ReportLink(
            str(path),
            None,
            f"the report is outside {root} ({REPORTS_ROOT_ENV}, the folder the reports server "
            f"at {base} serves): set {REPORTS_ROOT_ENV}, or write runs under it.",
        )
    relative = path.relative_to(root).as_posix()
    return ReportLink(str(path), f"{base}/{quote(relative)}", f"served by {base}")


def _served_file(root: Path, relative: str) -> Path | None:
    """The file `relative` names inside `root` (resolved), if it is a report file: a regular
    file, not a symlink, under no symlinked folder. A NUL byte (`%00`) names nothing."""
    if "\0" in relative or not relative.endswith(SERVED_SUFFIXES):
        return None
    path = Path(os.path.normpath(root / relative))
    try:
        if not path.is_relative_to(root) or path.resolve() != path:
            return None
        return path if stat.S_ISREG(path.lstat().st_mode) else None
    except (OSError, ValueError):
        return None


def _reports(root: Path) -> list[Path]:
    """The served reports, found without following a symlinked folder (a link to / made every
    index page walk the whole file system, for files it would not serve)."""
    found = [
        path
        for folder, _, names in os.walk(root)
        for path in (Path(folder) / name for name in names if name.endswith(".html"))
        if _served_file(root, str(path.relative_to(root)))
    ]
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return found[:INDEX_LIMIT]


def _index_page(root: Path) -> str:
    rows = "".join(
        f'<li><a href="{html.escape(quote(p.relative_to(root).as_posix()))}">'
        f"{html.escape(p.relative_to(root).as_posix())}</a></li>"
        for p in _reports(root)
    )
    return (
        "<!doctype html><meta charset='utf-8'><title>gymflow reports</title>"
        f"<h1>gymflow reports in {html.escape(str(root))}</h1>"
        f"<ul>{rows or '<li>none yet</li>'}</ul>"
    )


def reports_app(root: Path | str) -> Starlette:
    """A read-only ASGI app serving the report files under `root`, with an index at /."""
    base = Path(root).resolve()
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}

    async def index(_: Request) -> Response:
        return HTMLResponse(_index_page(base), headers=headers)

    async def report(request: Request) -> Response:
        found = _served_file(base, request.path_params["path"])
        if found is None:
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(found, headers=headers)

    return Starlette(routes=[Route("/", index), Route("/{path:path}", report)])
