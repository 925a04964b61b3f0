"""Which store is the one sealed at a path: a random id each store gets when its history begins,
sealed in it, and recorded with its path beside the seal key.

The generation (`generations.py`) tells the latest state of a store from an older one put back;
it said nothing of which store. The sealed-stores ledger and the generation recorded for a path
bound trust to (path, counter), so any of the owner's sealed stores whose generation a routine
writer had raised to the path's was that path's run: one `cp` of a weak experiment's store over
a nightly baseline turned the regression gate from "FAILED: -52.5 points" to "passed: +30.0
points", healthy, `reverify --check` clean (attack pass 8, F1), and last night's store copied
over tonight's read as tonight's.

So each store holds `meta.store_id`: 128 random bits drawn when its history begins (its first
seal, rows copied into a store that held none: a merge or a restored shard, an import, a copy
gymflow makes), or by the first writer of a store sealed before ids existed. It is sealed with
the store's generation (`generations.OPTIONAL`): removed or replaced, the generation no longer
holds over the store's records. Every writer records the id with the generation it commits at
the store's path (`store-generations/`), so a path names the store last written there, and a
store found there with another id, or none, is another store put there (`another_store`):
refused by every writer and flagged by every check, as an older state put back is
(`seal.StoreSeal.rolled_back`). Only gymflow's own moves record a new id for a path: a new
history begun there, an import renamed into place, a copy it makes.

Stores and paths from before the id: a store without one at a path whose record has none opens
as before (nothing tells it from the store written there: the same as before this check) and is
bound by its next writer, which draws its id and records it. A store WITH an id at a path whose
record has none but that this machine's writers wrote to is refused: the id was drawn by a
writer that recorded it at another path (the owner's experiment, given an id by a routine
reverify, copied over a run not written since). A path no writer here recorded opens either
way: a copy made by hand at a new path, which the history of a root does not count
(`history/counted.py`)."""

from __future__ import annotations

import os
import re

from duckdb import DuckDBPyConnection

#: The `meta` record holding the store's id.
STORE_ID_KEY = "store_id"
_ID = re.compile(r"[0-9a-f]{32}")


def new_store_id() -> str:
    """A store id: 128 random bits, hex."""
    return os.urandom(16).hex()


def is_store_id(text: str) -> bool:
    return _ID.fullmatch(text) is not None


def stored_store_id(con: DuckDBPyConnection) -> str | None:
    """The id the store holds (None: none, or not one: a store sealed before ids, or edited,
    which its generation's seal then shows)."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [STORE_ID_KEY]).fetchone()
    return str(row[0]) if row is not None and is_store_id(str(row[0])) else None


def another_store(found: str | None, recorded: tuple[str, ...], generation_recorded: int) -> bool:
    """Whether a store holding id `found` is another store than the one this machine's writers
    recorded at its path (`recorded`: the ids recorded at each name it is reached by, its path
    as named and as it resolves; `generation_recorded`: the path's generation): its id is not
    the one recorded at every name (a link put at a sealed store's path to another store names
    two, and the store can be only one of them); or it holds one where the path was written to
    before ids existed (it was drawn, and recorded, at another path)."""
    if recorded:
        return any(found != each for each in recorded)
    return found is not None and generation_recorded > 0


def another_store_message(found: str | None, recorded: tuple[str, ...]) -> str:
    """What a store refused by `another_store` is (its caller names the path)."""
    if len(recorded) > 1:
        expected = (
            f"{' and '.join(recorded)} at the names this path is reached by (a link: as named "
            "and as it resolves)"
        )
    else:
        expected = (recorded[0] if recorded else "none: written before store ids") + " here"
    return (
        f"another store put at this path: this machine's writers recorded store id {expected}, "
        f"and this store holds {found or 'none'} (a copy of another run's or an earlier "
        "store, e.g. by `cp` or a link); put the store that was here back, or move this one to a "
        "folder of its own (it opens there, and is not counted in that root's history)"
    )
