"""What a report on disk was rendered under, read back from the page itself.

A run report is static HTML: it cannot notice that the run is now read under another verifier
version. It names its version in a `<meta name="gymflow-verifier-version">` tag in its head
(machine-readable, and within the first few kilobytes), so the commands that read the run can
say when `RUN_DIR/report.html` is older than the version now current. Light on purpose: the CLI
reads it without importing Jinja."""

from __future__ import annotations

import html
import re
from pathlib import Path

META_NAME = "gymflow-verifier-version"
#: The head comes first and holds the tag; the inline stylesheet after it is about 10 KB.
_HEAD_BYTES = 4096
_TAG = re.compile(rf'<meta name="{META_NAME}" content="([^"]*)">')


def rendered_verifier_version(report: Path) -> str | None:
    """The verifier version `report` was rendered under; None when it has no such tag (a report
    of an older gymflow, a comparison) or cannot be read."""
    try:
        with report.open("rb") as handle:
            head = handle.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    found = _TAG.search(head)
    return html.unescape(found.group(1)) if found else None


def stale_report(run_dir: Path, current: str) -> str | None:
    """A warning when `run_dir`'s report.html was rendered under a version other than `current`."""
    report = run_dir / "report.html"
    rendered = rendered_verifier_version(report)
    if rendered is None or rendered == current:
        return None
    return (
        f"{report} was rendered under verifier version {rendered}, but the run is now read "
        f"under {current}: `gym report {run_dir}` renders it again"
    )
