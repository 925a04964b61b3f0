"""Every kind of report opened in headless Chromium from disk: it fetches nothing, runs nothing it
was handed, reads without JavaScript, and is not a blank page."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from gymflow.reports.render import write_report
from tests.conftest import gym, require_tool
from tests.reports.browser import chromium, visit
from tests.reports.png import pixel_variety

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    binary = require_tool("chromium")
    with chromium(binary) as tools:
        yield tools


@pytest.fixture(scope="module")
def reports(eval_run, clean_run, constructed_run, first_version, workdir) -> dict[str, Path]:
    """One report of each kind; the failures one is the report `gym eval run` wrote itself."""
    out = workdir / "browser"
    gym(
        "report",
        str(eval_run),
        "--compare",
        str(clean_run),
        "--out",
        str(out / "comparison.html"),
        cwd=workdir,
        check=True,
    )
    return {
        "clean": write_report(clean_run, out=out / "clean.html").path,
        "failures": eval_run / "report.html",
        "missing-and-hostile": write_report(
            constructed_run, out=out / "missing.html", verifier_version=first_version
        ).path,
        "reverified": write_report(constructed_run, out=out / "reverified.html").path,
        "comparison": out / "comparison.html",
    }


def _title(path: Path) -> str:
    return html.unescape(re.search(r"<title>(.*?)</title>", path.read_text(), re.S).group(1))


KINDS = ["clean", "failures", "missing-and-hostile", "reverified", "comparison"]


@pytest.mark.parametrize("kind", KINDS)
def test_report_opens_offline_and_runs_nothing_it_was_handed(browser, reports, artifacts, kind):
    path = reports[kind]
    page = visit(browser, path, screenshot=True)
    assert page.requests == [path.resolve().as_uri()], "the page itself, and nothing else"
    assert page.blocked == [], "no resource or script was refused (none was attempted)"
    assert page.exceptions == []
    assert not page.marker
    assert page.title == _title(path) and page.title.startswith("gymflow ")
    shot = artifacts / f"{kind}.png"
    shot.write_bytes(page.screenshot)
    print(f"screenshot of the {kind} report: {shot}")
    colours, inked = pixel_variety(page.thumbnail)
    assert colours > 50 and inked > 0.03, (colours, inked)


def test_hostile_text_is_shown_as_text(browser, reports):
    page = visit(browser, reports["missing-and-hostile"])
    assert '<script>document.title="PWNED";window.__pwned=1</script>' in page.text
    assert "javascript:document.title" in page.text
    assert not page.marker and page.title != "PWNED"


@pytest.mark.parametrize("kind", KINDS)
def test_report_reads_without_javascript(browser, reports, kind):
    page = visit(browser, reports[kind], javascript=False)
    assert page.requests == [reports[kind].resolve().as_uri()]
    text = page.text.upper()  # labels are upper-cased by CSS, and innerText follows it
    if kind == "comparison":
        assert "PAIRED DIFFERENCE" in text and "FLIPPED TASKS" in text
    else:
        assert "RECOMMENDED NEXT ACTION" in text and "PASS@1" in text and "COVERAGE" in text
    assert "filter rows" not in page.text  # the filter box is made by the script


def test_the_probe_sees_requests_and_scripts_when_there_are_some(browser, tmp_path):
    """The checks above are not vacuous: a page that fetches and runs script is caught."""
    page_path = tmp_path / "leaky.html"
    page_path.write_text(
        '<!doctype html><title>t</title><img src="https://example.com/x.png">'
        "<script>document.title='PWNED';document.body.dataset.pwned=1</script>"
    )
    page = visit(browser, page_path)
    assert "https://example.com/x.png" in page.requests
    assert page.title == "PWNED" and page.marker
