"""Which runs under a root count in its history (the gate's pinned baseline and its CUSUM): a
run counts only at a path where this machine's key sealed it, and one run counts once.

Trust was decided per store ("is it sealed, by this key?"), where the question is per place
("is this run one of this root's nights?"). One `cp -r` of the owner's own older, weaker run
sealed in another folder put a checkable store into the nightly root, dated before every
night: it became the pinned baseline and turned "FAILED: -35.0 points" into "passed: +20.0
points" (attack pass 7, s09); copies of a good night would have fed the CUSUM as extra nights.
The sealed-stores ledger knows where this key sealed each store (`seal.sealed_at`): a copy made
by hand at a new path is not listed there, a copy gymflow makes is (a study's arm). A run is
one collection: its run id (the config's fingerprint, shared by every night of an unchanged
config) and when it was made, which a byte copy keeps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gymflow.history.catalog import CatalogEntry
from gymflow.store.db import STORE_FILE
from gymflow.store.sealed_stores import sealed_at

NOT_SEALED_HERE = (
    "not sealed at this path by this machine's key: a copy made elsewhere, or another's run"
)


@dataclass(frozen=True, slots=True)
class LeftOut:
    entry: CatalogEntry
    why: str

    def __str__(self) -> str:
        return f"{self.entry.run_dir} ({self.why})"


@dataclass(frozen=True, slots=True)
class History:
    #: the runs that count, oldest first
    runs: list[CatalogEntry]
    left_out: list[LeftOut]


def sealed_here(entries: list[CatalogEntry]) -> History:
    """`entries` sealed where they are, by this machine's key, and the others with why: a copy
    made by hand (or a link) at a path of the root is not one of its runs. The trend drew the
    owner's weak experiment copied into the nightly root as a night, 11.7% among 94% and 42%,
    with nothing left out, while the gate left it out (attacker's pass 9, A2)."""
    runs, left_out = [], []
    for entry in entries:
        if sealed_at(Path(entry.run_dir) / STORE_FILE):
            runs.append(entry)
        else:
            left_out.append(LeftOut(entry, NOT_SEALED_HERE))
    return History(runs, left_out)


def counted(entries: list[CatalogEntry]) -> History:
    """`entries` (one benchmark version's runs under a root) as they count in its history:
    those sealed where they are (`sealed_here`), each run once (the first by path among copies
    gymflow made), and the others with why they do not count."""
    here = sealed_here(sorted(entries, key=lambda e: (e.created_at or datetime.min, e.run_dir)))
    runs: dict[tuple[str, datetime | None], CatalogEntry] = {}
    left_out = list(here.left_out)
    for entry in here.runs:
        same = runs.get((entry.run_id, entry.created_at))
        if same is not None:
            left_out.append(LeftOut(entry, f"the same run as {same.run_dir}: a run counts once"))
            continue
        runs[(entry.run_id, entry.created_at)] = entry
    return History(list(runs.values()), left_out)
