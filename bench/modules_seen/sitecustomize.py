"""Put on PYTHONPATH by bench/fast_tier_modules.py: every Python process of the test run (pytest,
its xdist workers, each `gym` subprocess, each bench script a test starts) writes, as it exits,
the gymflow modules it imported to a file of its own in $GYMFLOW_MODULES_SEEN. A process killed
by a signal writes nothing; the tests that kill one also run its command in a process that
exits."""

from __future__ import annotations

import atexit
import os
import sys


def _write() -> None:
    folder = os.environ.get("GYMFLOW_MODULES_SEEN")
    if not folder:
        return
    names = sorted(name for name in list(sys.modules) if name.split(".")[0] == "gymflow")
    if names:
        with open(os.path.join(folder, f"{os.getpid()}.txt"), "a", encoding="utf-8") as out:
            out.write("\n".join(names) + "\n")


atexit.register(_write)
