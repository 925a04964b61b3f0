"""`gym serve reports`: the reports under a folder over HTTP, and the URL a flow links to."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from gymflow.reports.serving import report_link
from gymflow.simulated.local_server import free_port
from tests.conftest import GYM


def test_the_link_is_the_report_under_the_base_url(tmp_path: Path) -> None:
    report = tmp_path / "runs" / "nightly 1" / "report.html"
    env = {"GYMFLOW_REPORTS_URL": "http://reports:8200/", "GYMFLOW_REPORTS_ROOT": str(tmp_path)}
    link = report_link(report, env)
    assert link.url == "http://reports:8200/runs/nightly%201/report.html"


def test_without_a_base_url_the_link_is_the_path_and_says_why(tmp_path: Path) -> None:
    link = report_link(tmp_path / "report.html", {})
    assert link.url is None
    assert link.path == str((tmp_path / "report.html").resolve())
    assert "GYMFLOW_REPORTS_URL is not set" in link.note
    assert "gym serve reports --root" in link.note


def test_a_report_outside_the_served_root_is_not_given_a_url(tmp_path: Path) -> None:
    env = {"GYMFLOW_REPORTS_URL": "http://r:1", "GYMFLOW_REPORTS_ROOT": str(tmp_path / "a")}
    link = report_link(tmp_path / "b" / "report.html", env)
    assert link.url is None and "outside" in link.note


def _get(url: str) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_gym_serve_reports_serves_reports_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "served"
    run = root / "runs" / "a b"
    run.mkdir(parents=True)
    (run / "report.html").write_text("<!doctype html><title>the report</title>")
    (run / "store.duckdb").write_bytes(b"not for the web")
    (tmp_path / "secret.html").write_text("outside the root")
    (root / "escape.html").symlink_to(tmp_path / "secret.html")
    os.link(run / "store.duckdb", run / "hard.html")  # another name for the store
    port = free_port()
    server = subprocess.Popen(
        [GYM, "serve", "reports", "--root", str(root), "--port", str(port)],
        env={**os.environ, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        link = report_link(
            run / "report.html", {"GYMFLOW_REPORTS_URL": base, "GYMFLOW_REPORTS_ROOT": str(root)}
        )
        page = _get(link.url)
        assert page.status_code == 200, page.text
        assert "the report" in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        index = _get(f"{base}/")
        assert 'href="runs/a%20b/report.html"' in index.text
        for refused in ("runs/a%20b/store.duckdb", "escape.html", "..%2Fsecret.html",
                        "runs/a%20b/hard.html"):  # fmt: skip
            assert _get(f"{base}/{refused}").status_code == 404, refused
        # a page that rebinds its own name to 127.0.0.1 sends that name: not answered
        rebound = httpx.get(link.url, headers={"host": f"attacker.example:{port}"}, timeout=5)
        assert rebound.status_code == 400 and "the report" not in rebound.text
        assert httpx.get(link.url.replace("127.0.0.1", "localhost"), timeout=5).status_code == 200
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    assert f"on {base}" in output
