"""A store sealed by an earlier gymflow, sealed as this one does (`gym eval migrate`).

How a store's seal is versioned is its seal record's version (`seal.RECORD_VERSION`): each
version says what beside the verdicts is sealed. Versions 3 to 5 kept the row count of the
rollouts' and model calls' records outside the key, which no later check can make up for (two
more copies of a sealed model call, the count raised by two, passed every check): a store
sealed so is refused by every reader and writer (`seal.EarlierSealError`) until its owner
migrates it. The migration is a writer like any other: it checks every seal of the store in
full first, as those versions sealed it (`sealed_first.check_before_writing`), refuses with
nothing written when one does not match, and then writes the seal record of this version, with
the rows' records and the task list sealed under it, in one transaction. No row of the store's
data changes. What those records could not tell, two or more copies of one model call, is
refused too: no gymflow writer stores two calls of one (rollout, call index, attempt).

A store sealed before any row was (versions 1 and 2) is read as it always was and sealed so by
its next writer; migrating it does the same now."""

from __future__ import annotations

from dataclasses import dataclass

from duckdb import DuckDBPyConnection

from gymflow.core.errors import UserError
from gymflow.store.db import transaction
from gymflow.store.queries.model_calls import repeated_calls
from gymflow.store.seal import RECORD_VERSION, claim, foreign_key_message, seal_tasks, store_seal
from gymflow.store.seal_key import SealKeyError, load_key
from gymflow.store.sealed_first import SealsBroken, check_before_writing
from gymflow.store.sealed_stores import store_file


@dataclass(frozen=True)
class Migrated:
    """The store's seal record version before and after (the same: nothing to do)."""

    before: int
    after: int


def migrate(con: DuckDBPyConnection) -> Migrated:
    """Seal the store `con` has open (for writing) as this gymflow does, after checking every
    seal of it in full: SealsBroken (exit 2) when one does not match, SealKeyError when this
    machine holds no key or not the one that sealed it, UserError when it was never sealed;
    nothing written in each case."""
    where = store_file(con) or "run store"
    key = load_key(create=False)
    if key is None:
        raise SealKeyError(
            f"{where}: this machine has no seal key; only the machine whose key sealed the "
            "store can migrate it"
        )
    found = store_seal(con, key)
    if found.state == "foreign":
        raise SealKeyError(foreign_key_message(where, found.key_id, key))
    if found.state == "unsealed":
        raise UserError(
            f"{where}: never sealed (written before gymflow sealed its verdicts): there is "
            "no seal to check, so nothing is migrated; its next writer seals it"
        )
    check_before_writing(con, where, earlier=True)  # every seal, stripped ones refused too
    if found.record_version == RECORD_VERSION:
        return Migrated(RECORD_VERSION, RECORD_VERSION)
    repeated, examples = repeated_calls(con, 3)
    if repeated:
        raise SealsBroken(
            f"{where}: {repeated} model calls are stored more than once (e.g. of "
            f"{', '.join(examples)}): copies of a sealed call, which the seal record of an "
            "earlier gymflow cannot tell; nothing was written"
        )
    with transaction(con):
        seal_tasks(con, claim(con, where))
    return Migrated(found.record_version, RECORD_VERSION)
