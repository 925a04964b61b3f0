"""Pages of the Prefect UI (a single-page app) in headless Chromium: open one, wait until it shows
what it is for, read its text and keep a screenshot."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from tests.reports.browser import DevTools

WIDTH, HEIGHT = 1400, 1800


def capture(
    tools: DevTools,
    url: str,
    shows: list[str],
    out: Path,
    timeout: float = 120,
    click: list[str] | None = None,
) -> str:
    """Open `url`, wait until its text holds every string of `shows` (clicking, once it appears,
    the element showing each text of `click`), save a PNG to `out`; return the page's text."""
    target = tools.call("Target.createTarget", url="about:blank")["targetId"]
    session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime"):
        tools.call(f"{domain}.enable", session)
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=WIDTH,
        height=HEIGHT,
        deviceScaleFactor=1,
        mobile=False,
    )
    tools.call("Page.navigate", session, url=url)

    def text() -> str:
        result = tools.call(
            "Runtime.evaluate",
            session,
            expression="document.body ? document.body.innerText : ''",
            returnByValue=True,
        )
        return result["result"].get("value") or ""

    pending = list(click or [])
    deadline = time.monotonic() + timeout
    while True:
        for label in list(pending):
            clicked = tools.call(
                "Runtime.evaluate",
                session,
                # the innermost element showing exactly the label: a click bubbles to its handler
                expression=(
                    "(function(){var e=[...document.querySelectorAll('body *')].filter("
                    f"x=>x.innerText&&x.innerText.trim()==={label!r}).pop();"
                    "if(e){e.click();return true}return false})()"
                ),
                returnByValue=True,
            )
            if clicked["result"].get("value"):
                pending.remove(label)
        page = text()
        if not pending and all(s in page for s in shows):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} never showed {shows} (clicks left {pending}):\n{page}")
        time.sleep(0.5)
    time.sleep(1.0)  # let the last requests' content render
    shot = tools.call("Page.captureScreenshot", session, format="png")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    page = text()
    tools.call("Target.closeTarget", targetId=target)
    return page
