"""`gym serve reports --root DIR`: the run reports under DIR over HTTP, so the Prefect UI's
report link (GYMFLOW_REPORTS_URL) opens them in a browser."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymflow.cli.app import console, fail, serve_app
from gymflow.reports.serving import REPORTS_ROOT_ENV, REPORTS_URL_ENV


@serve_app.command("reports")
def serve_reports(
    root: Annotated[
        Path, typer.Option(help="Folder the runs write into (their report.html files).")
    ] = Path("."),
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8200,
    host: Annotated[
        str, typer.Option(help="Interface to bind (0.0.0.0 to serve other machines).")
    ] = "127.0.0.1",
) -> None:
    """Serve the HTML reports under ROOT (read-only; report files only, an index at /)."""
    import uvicorn

    from gymflow.reports.serving import LOOPBACK_NAMES, reports_app

    if not root.is_dir():
        fail(f"--root {root}: not a folder")
    url = f"http://{host}:{port}"
    console.print(f"serving the reports under {root.resolve()} on {url}", highlight=False)
    console.print(
        f"flows link to them with {REPORTS_URL_ENV}={url} {REPORTS_ROOT_ENV}={root.resolve()} "
        "in the environment of the worker (or shell) that runs them",
        highlight=False,
        soft_wrap=True,
    )
    # bound to loopback, only this machine's names are answered (a rebinding page's are not);
    # bound to another interface, the user serves other machines under names gymflow cannot know
    hosts = LOOPBACK_NAMES if host in LOOPBACK_NAMES else None
    uvicorn.run(reports_app(root, hosts), host=host, port=port, log_level="warning")
