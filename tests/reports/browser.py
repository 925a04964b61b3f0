"""Headless Chromium driven over the DevTools protocol: open a report from disk and record every
network request the page attempts, what script changed, and what it looks like.

Used by the browser tests and by bench/report_size.py."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from tests.servers import stop

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Any host name resolves nowhere: a request that slipped through still could not leave.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
WIDTH, HEIGHT = 1280, 2000


@dataclass
class PageVisit:
    url: str
    title: str
    requests: list[str]
    blocked: list[str]  # console / CSP messages about refused resources or scripts
    exceptions: list[str]
    marker: bool  # a DOM marker an injected script would have set
    text: str  # the page's visible text
    load_ms: float  # navigation start to load event, from the page's own timing
    wall_s: float  # navigate command to load event, as seen from here
    screenshot: bytes = b""
    thumbnail: bytes = b""
    extra: dict[str, Any] = field(default_factory=dict)


class DevTools:
    """A flat-session DevTools client over one websocket."""

    def __init__(self, url: str) -> None:
        self.ws = connect(url, max_size=None, open_timeout=20)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params):
        ident = next(self.ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        while True:
            event = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return event

    def session_events(self, method: str, session: str) -> list[dict[str, Any]]:
        return [
            e["params"]
            for e in self.events
            if e.get("method") == method and e.get("sessionId") == session
        ]

    def close(self) -> None:
        self.ws.close()


@contextmanager
def chromium(binary: str, flags: tuple[str, ...] = FLAGS):
    """A headless Chromium with a fresh profile, listening on 127.0.0.1 only; stopped on exit."""
    profile = Path(tempfile.mkdtemp(prefix="gymflow-chromium-"))
    proc = subprocess.Popen(
        [binary, *flags, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        tools = DevTools(f"ws://127.0.0.1:{port}{path}")
        try:
            yield tools
        finally:
            tools.close()
    finally:
        stop(proc)
        shutil.rmtree(profile, ignore_errors=True)


#: What runs off a page: the document wider than the window, and each table (by id, or its
#: position) whose right edge passes its page's content column (`main`) or the window. A table
#: in a box that scrolls (`.scroll`) stays in that box.
OVERFLOW = """(function(){
  var doc = document.documentElement, main = document.querySelector('main') || document.body;
  var right = Math.min(main.getBoundingClientRect().right, doc.clientWidth);
  function scrolls(e){
    for (var p = e.parentElement; p && p !== main; p = p.parentElement) {
      if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  }
  var wide = [...document.querySelectorAll('table')].map(function(t, i){
    var past = scrolls(t) ? 0 : t.getBoundingClientRect().right - right;
    return [t.id || ('table ' + i), Math.round(past)];
  }).filter(function(x){ return x[1] > 1; });
  return {page: doc.scrollWidth - doc.clientWidth, tables: wide};
})()"""


def visit(
    tools: DevTools,
    path: Path,
    *,
    javascript: bool = True,
    screenshot: bool = False,
    width: int = WIDTH,
) -> PageVisit:
    """Open `path` in a new tab `width` pixels wide and report what happened; `extra` holds
    what runs off the page (`OVERFLOW`)."""
    if not path.is_file():
        raise FileNotFoundError(path)  # Chromium would show its own error page instead
    target = tools.call("Target.createTarget", url="about:blank")["targetId"]
    session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    tools.events.clear()
    for domain in ("Network", "Page", "Runtime", "Log"):
        tools.call(f"{domain}.enable", session)
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=width,
        height=HEIGHT,
        deviceScaleFactor=1,
        mobile=False,
    )
    if not javascript:
        tools.call("Emulation.setScriptExecutionDisabled", session, value=True)
    url = path.resolve().as_uri()
    start = time.perf_counter()
    tools.call("Page.navigate", session, url=url)
    tools.wait_for("Page.loadEventFired", session)
    wall = time.perf_counter() - start

    def evaluate(expression: str) -> Any:
        result = tools.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        return result["result"].get("value")

    result = PageVisit(
        url=url,
        title=evaluate("document.title"),
        requests=[
            e["request"]["url"] for e in tools.session_events("Network.requestWillBeSent", session)
        ],
        blocked=[e["entry"]["text"] for e in tools.session_events("Log.entryAdded", session)],
        exceptions=[
            json.dumps(e["exceptionDetails"])
            for e in tools.session_events("Runtime.exceptionThrown", session)
        ],
        marker=bool(evaluate("!!document.querySelector('[data-pwned]') || !!window.__pwned")),
        text=evaluate("document.body.innerText"),
        load_ms=evaluate(
            "(function(){var n=performance.getEntriesByType('navigation')[0];"
            "return n ? n.loadEventEnd : -1})()"
        ),
        wall_s=wall,
        extra={"overflow": evaluate(OVERFLOW)},
    )
    if screenshot:
        shot = tools.call("Page.captureScreenshot", session, format="png")
        result.screenshot = base64.b64decode(shot["data"])
        clip = {"x": 0, "y": 0, "width": width, "height": HEIGHT, "scale": 0.25}
        thumb = tools.call("Page.captureScreenshot", session, format="png", clip=clip)
        result.thumbnail = base64.b64decode(thumb["data"])
    tools.call("Target.closeTarget", targetId=target)
    return result
