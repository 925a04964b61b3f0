"""How the `gym` process ends: everything Python's own exit does that anyone can see, without
tearing down every module and object one by one.

With Prefect, pydantic and DuckDB loaded, that teardown (module dicts cleared, several full
garbage collections over a large heap, every object freed) is most of the time between a
command's last line and the shell's prompt: 1.2 to 3 s of `gym eval run`'s wall time on a loaded
2-core machine (bench/fixed_cost.py, "exit"). What it does is invisible from outside once the
steps below have run: non-daemon threads joined and the callbacks `threading` runs at exit
(Prefect sends the logs and events it still holds), `atexit` callbacks (logging flushed and
closed, temporary folders removed, Prefect's services stopped), stdout and stderr flushed."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import NoReturn


def is_the_command() -> bool:
    """Whether this process is the `gym` command itself (its console script, or
    `python -m gymflow.cli`), not a program or test that called `gymflow.cli.main`."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "gymflow.cli.__main__":
        return True
    return spec is None and Path(getattr(main, "__file__", "") or "").name in {"gym", "gymflow"}


def exit_process(code: int) -> NoReturn:
    """End this process with `code` as Python's exit would, but for the teardown."""
    # what Python's exit does first: wait for non-daemon threads, run threading's exit hooks
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)
