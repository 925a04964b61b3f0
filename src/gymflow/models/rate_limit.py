"""A requests-per-minute limit for one run's model calls.

Requests are spaced evenly (one every 60/rpm seconds) rather than let through in bursts: a server
that enforces its limit over a sliding window then never sees more than the limit, and 429s from
our own burstiness do not eat the retry budget."""

from __future__ import annotations

import asyncio
import time


class RequestSpacer:
    """`await spacer.wait()` before each request; returns how long it waited."""

    def __init__(self, requests_per_minute: float) -> None:
        self.interval = 60.0 / requests_per_minute
        self._next = 0.0

    async def wait(self) -> float:
        now = time.monotonic()
        # Reserve the slot before sleeping, so concurrent callers queue up in order.
        slot = max(now, self._next)
        self._next = slot + self.interval
        delay = slot - now
        if delay > 0:
            await asyncio.sleep(delay)
        return delay
