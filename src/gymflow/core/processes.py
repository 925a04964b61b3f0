"""Whether a process still runs, for leftovers named by the PID of the process that made them
(sandbox scratch folders, staged imports, the local Prefect server), and whether a child server
answers yet."""

from __future__ import annotations

import http.client
import os
from urllib.parse import urlsplit


def pid_alive(pid: int) -> bool:
    """True while a process with this PID exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def answers_ok(url: str, timeout: float = 1.0) -> bool:
    """True when a plain-HTTP GET of `url` (a child server's health route) answers 200. Through
    http.client, not httpx: an httpx client builds an SSL context first (0.2-0.7 s, even for an
    http:// URL), which polling a server that is starting paid on every try."""
    parts = urlsplit(url)
    if not parts.hostname:  # nothing answers a URL without a host
        return False
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
