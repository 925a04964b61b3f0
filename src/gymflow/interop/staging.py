"""Writing a new store through a temporary file that becomes the run only when complete.

The store is built in a hidden folder beside the run folder, committed and checkpointed, then
moved into place with one rename; a killed or failed import leaves at most that hidden folder
(named with the importing process's id), never a half-written store at `--out` that would block
the next import."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gymflow.interop.nemo_read import InteropError
from gymflow.store.db import STORE_FILE, StoreError, connect, store_path


@contextmanager
def staged_store(out: Path) -> Iterator:
    """A connection to a fresh store, in one transaction; on success it becomes `out`'s store."""
    target = store_path(out)
    run_dir = target.parent
    staging = run_dir.parent / f".{run_dir.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        con = connect(staging, create=True)
    except (OSError, StoreError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InteropError(f"{run_dir}: cannot create the store: {exc}") from None
    try:
        con.execute("BEGIN TRANSACTION")
        yield con
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        con.close()
        run_dir.mkdir(parents=True, exist_ok=True)
        os.replace(staging / STORE_FILE, target)
    except OSError as exc:
        raise InteropError(f"{run_dir}: cannot write the store: {exc}") from None
    finally:
        con.close()
        shutil.rmtree(staging, ignore_errors=True)
