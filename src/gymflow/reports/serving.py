"""Reports over HTTP: where a report is published (its URL under a configured base), and the
small read-only server behind `gym serve reports`.

A browser refuses `file://` links from a web page (the Prefect UI), and with several workers a
report sits on whichever machine ran the flow; a server over the folder the runs write into makes
the report one click away. Only report files are served (no stores, no configs): regular files named
as reports, reached from the root without a symlink on the way (a `.html` link to the run's
`gymflow.duckdb` served the store), with the reports' own Content-Security-Policy as a header.
The file is opened once, folder by folder, and served from that open file."""

from __future__ import annotations

import html
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gymflow.core.trees import walk
from gymflow.reports.render import CSP

#: Base URL of a `gym serve reports` server, e.g. http://reports.internal:8200
REPORTS_URL_ENV = "GYMFLOW_REPORTS_URL"
#: The folder that server serves, as this machine sees it (default: the working directory).
REPORTS_ROOT_ENV = "GYMFLOW_REPORTS_ROOT"
#: What is served: the reports and the trajectories file beside a large one (`render.export_path`:
#: `NAME.trajectories.jsonl`, served only beside its report `NAME.html`; any other `.jsonl`
#: under the root, a held-out dataset, is not a report's).
TRAJECTORIES = ".trajectories.jsonl"
SERVED_SUFFIXES = (".html", TRAJECTORIES)
MEDIA_TYPES = {".html": "text/html; charset=utf-8", TRAJECTORIES: "application/x-ndjson"}
#: Reports listed on the index page, newest first.
INDEX_LIMIT = 500
#: Folders below the root the index looks into (a run's reports sit two or three down).
INDEX_DEPTH = 16


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


@dataclass(frozen=True)
class _Served:
    """A report file opened for serving: the open file is what is served, never its path again
    (checking a path and then serving it by path let a writer inside the root swap in a symlink
    to the store between the two)."""

    file: BinaryIO
    info: os.stat_result


#: Each folder on the way is opened as a folder, never through a symlink, relative to the one
#: before it; the file itself is opened without following a symlink and without waiting on a
#: FIFO's writer, then checked as opened (fstat) to be a regular file.
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_served(root: Path, relative: str) -> _Served | None:
    """The report file `relative` names inside `root`, opened, if it is one: a regular file
    named as a report, reached one component at a time from the root without a symlink, `..`
    or an empty part, with no other name (a hard link `x.html` to a run's store was served
    whole). A NUL byte (`%00`) names nothing."""
    parts = relative.split("/")
    if "\0" in relative or not relative.endswith(SERVED_SUFFIXES):
        return None
    if any(part in ("", ".", "..") for part in parts):
        return None
    fd = -1
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                inner = os.open(part, _FOLDER_FLAGS, dir_fd=folder)
                os.close(folder)
                folder = inner
            if parts[-1].endswith(TRAJECTORIES) and not _beside_report(parts[-1], folder):
                return None
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
        finally:
            os.close(folder)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return _Served(os.fdopen(fd, "rb"), info)
    except (OSError, ValueError):
        if fd >= 0:
            os.close(fd)
        return None


def _beside_report(name: str, folder: int) -> bool:
    """Whether the folder holds the report a trajectories file belongs to, as a regular file."""
    report = name[: -len(TRAJECTORIES)] + ".html"
    try:
        return stat.S_ISREG(os.stat(report, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _reports(root: Path) -> list[tuple[Path, float]]:
    """The served reports with their modification times, found without following a symlinked
    folder (a link to / made every index page walk the whole file system, for files it would
    not serve) and at most INDEX_DEPTH folders down (`core.trees.walk`: a folder 1,100 deep made
    the index answer 500, attack pass 8)."""
    found = []
    for folder, _, names in walk(root, INDEX_DEPTH):
        for path in (Path(folder) / name for name in names if name.endswith(".html")):
            served = _open_served(root, path.relative_to(root).as_posix())
            if served is not None:
                served.file.close()
                found.append((path, served.info.st_mtime))
    found.sort(key=lambda item: item[1], reverse=True)
    return [path for path, _ in found[:INDEX_LIMIT]]


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


#: the names a browser on this machine uses for a server bound to loopback
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


def reports_app(root: Path | str, hosts: Sequence[str] | None = LOOPBACK_NAMES) -> Starlette:
    """A read-only ASGI app serving the report files under `root`, with an index at /. Only
    requests naming one of `hosts` (None: any) are answered: a web page the user opens could
    otherwise rebind its own name to 127.0.0.1 and read every report (DNS rebinding)."""
    base = Path(root).resolve()
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}

    async def index(_: Request) -> Response:
        return HTMLResponse(_index_page(base), headers=headers)

    async def report(request: Request) -> Response:
        served = _open_served(base, request.path_params["path"])
        if served is None:
            return PlainTextResponse("not found", status_code=404)
        path = request.path_params["path"]
        return StreamingResponse(
            _chunks(served.file),
            media_type=MEDIA_TYPES[next(s for s in SERVED_SUFFIXES if path.endswith(s))],
            headers={**headers, "Content-Length": str(served.info.st_size)},
        )

    middleware = [] if hosts is None else [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)]
    return Starlette(
        routes=[Route("/", index), Route("/{path:path}", report)], middleware=middleware
    )


def _chunks(file: BinaryIO, size: int = 1 << 16) -> Iterator[bytes]:
    """The open file's bytes (read in Starlette's thread pool), closed when done."""
    with file:
        while chunk := file.read(size):
            yield chunk
