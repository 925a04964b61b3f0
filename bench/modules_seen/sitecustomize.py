"""Put on PYTHONPATH by bench/fast_tier_modules.py: every Python process of the test run (pytest,
its xdist workers, each `gym` subprocess, each bench script a test starts) writes, as it exits,
the files of the gymflow modules it imported to a file of its own in $GYMFLOW_MODULES_SEEN.
Files, not names: an environment's module is loaded from its folder under a name of the
registry's (core/registry.py). A process killed by a signal writes nothing; the tests that kill
one also run its command in a process that exits. A process under a test's file-size limit
writes nothing either, silently: its own stderr is what that test checks."""

from __future__ import annotations

import atexit
import os
import sys

_PACKAGE = f"{os.sep}gymflow{os.sep}"


def _write() -> None:
    folder = os.environ.get("GYMFLOW_MODULES_SEEN")
    if not folder:
        return
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    mine = sorted(os.path.realpath(f) for f in files if isinstance(f, str) and _PACKAGE in f)
    if not mine:
        return
    try:
        with open(os.path.join(folder, f"{os.getpid()}.txt"), "a", encoding="utf-8") as out:
            out.write("\n".join(mine) + "\n")
    except OSError:  # a test's own file-size limit (a full disk simulated): the test's, not ours
        return


atexit.register(_write)
