"""Writing a new store through a temporary folder whose store takes its name only when complete
(exported files go through gymflow.core.written, as every file gymflow writes).

The store is built in a hidden folder beside the run folder, committed and checkpointed, then
moved into place with one rename; a killed or failed import leaves at most that hidden folder
(named with the importing process's id, and removed by the next import into that folder), never a
half-written store at `--out` that would block the next import."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gymflow.core.processes import pid_alive
from gymflow.core.written import unlinked_folder
from gymflow.interop.nemo_read import InteropError
from gymflow.store.db import STORE_FILE, StoreError, connect, store_path, transaction
from gymflow.store.generations import record_at, start_above, stored_number
from gymflow.store.seal import RECORD_VERSION, built_aside
from gymflow.store.seal_key import load_key
from gymflow.store.sealed_stores import remember
from gymflow.store.store_ids import stored_store_id


def _remove_abandoned(run_dir: Path) -> None:
    """Staging folders of imports into this run folder whose process is gone (killed)."""
    for folder in run_dir.parent.glob(f".{run_dir.name}.importing-*"):
        pid = folder.name.rpartition("-")[2]
        if not pid.isdigit():
            continue
        if not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def staged_store(out: Path) -> Iterator:
    """A connection to a fresh store, in one transaction; on success it becomes `out`'s store."""
    target = store_path(out)
    run_dir = target.parent
    staging = run_dir.parent / f".{run_dir.name}.importing-{os.getpid()}"
    unlinked_folder(run_dir)  # the store would be renamed wherever a link there points
    _remove_abandoned(run_dir)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        con = connect(staging, create=True)
    except (OSError, StoreError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InteropError(f"{run_dir}: cannot create the store: {exc}") from None
    try:
        with built_aside(store_path(staging)), transaction(con):
            start_above(con, target)  # its generations start above any store's that was there
            yield con
        con.execute("CHECKPOINT")
        generation, store_id = stored_number(con), stored_store_id(con)
        con.close()
        run_dir.mkdir(parents=True, exist_ok=True)
        os.replace(staging / STORE_FILE, target)
        # recorded as sealed where it now is, never at the staging path it was sealed at; its
        # generation, above any recorded there (`start_above`), is recorded there: a store
        # imported over another one opens, and the one it replaced is refused if put back;
        # with its id, drawn afresh (`start_above`): the path's store is now this one
        if (key := load_key(create=False)) is not None:
            remember(target, key, version=RECORD_VERSION)
            record_at(key, target, generation, store_id)
    except OSError as exc:
        raise InteropError(f"{run_dir}: cannot write the store: {exc}") from None
    finally:
        con.close()
        shutil.rmtree(staging, ignore_errors=True)
