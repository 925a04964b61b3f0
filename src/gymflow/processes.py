"""Whether a process still runs, for leftovers named by the PID of the process that made them
(sandbox scratch folders, staged imports, the local Prefect server)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this PID exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
