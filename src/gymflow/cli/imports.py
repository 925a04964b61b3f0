"""Importing a command's modules without the cyclic garbage collector's full collections.

Prefect, pydantic and gymflow's flows allocate about a million objects as they are imported,
none of them garbage; the collector's full collections over that growing heap (three of them)
were 0.2 s of every `gym eval run` (bench/fixed_cost.py, "import Prefect and the flows"). The
modules imported inside `importing` are then frozen: later collections during the run skip
them too. Only the `gym` process itself does this; a program or test calling `main` keeps its
own collector as it is."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from gymflow.cli.ending import is_the_command


@contextmanager
def importing() -> Iterator[None]:
    """Collect nothing while the block imports; freeze what it imported."""
    if not is_the_command() or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
