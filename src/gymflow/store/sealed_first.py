"""Before any writer writes to a store, or carries its rows into another: what it builds on is
what was sealed. The one gate every writer passes (`check_before_writing`): registration (a new
run, `gym eval run --resume`, each shard), a merge (`gym eval aggregate`: the destination and
every shard), a verifier version made current, reverify, and an export (what `gym import`
would seal afresh elsewhere).

A verdict's seal binds its rollout's output and trajectory, but a writer that judges the
rollouts again, or copies them into a new store under a fresh seal, never looked at the old
seals. An attacker's pass (issue 42) rewrote the failing rollouts' outputs to the reference
answer and deleted their verdicts: health said `verification_missing`, and the owner's routine
`gym eval reverify RUN` judged the edited outputs and sealed them (pass@1 59% -> 100%, healthy,
`--check` clean); a second pass found merge, resume and import had no such check at all. So
before it writes, every writer recomputes every seal (never the once-per-state record:
`checked_stores.py`; only the column statistics' check is taken from it, as the file's own
bytes) and refuses when one does not match, when the seals were stripped, and when
a completed rollout of a store this key sealed has no verdict at all: every gymflow writer
stores a rollout with its verdict, so one without any was judged once and its verdict deleted.
Only a verdict set aside for judging again (`superseded.py`) whose seal still matches its
rollout, or an imported run's row without a reward (never judged by gymflow, and sealed as such
by the import: `sealed_inputs.py`), leaves a rollout without one honestly.

The check vouches for what the writer builds on, never for the file it leaves: DuckDB's lock is
advisory, so another process can write the file while the writer holds it, and only a later
check (`checked_stores.check_seals_once`) records a file as checked."""

from __future__ import annotations

from duckdb import DuckDBPyConnection

from gymflow.core.errors import GateFailed
from gymflow.store.checked_stores import statistics_checked
from gymflow.store.seal import (
    CALLS_EDITED,
    ROLLOUTS_EDITED,
    STRIPPED,
    VERDICTS_EDITED,
    check_inputs,
    check_seals,
    older_state,
)
from gymflow.store.seal_key import SealKey, SealKeyError, load_key
from gymflow.store.unjudged import verdicts_deleted


class SealsBroken(GateFailed):
    """The rollouts a writer would build on are not those sealed: an integrity failure (exit
    2), nothing written."""


def check_before_writing(con: DuckDBPyConnection, where: str, *, earlier: bool = False) -> bool:
    """Refuse when the store `con` has open is not what its writers sealed: SealsBroken (exit
    2) when a seal does not match, the seals were stripped, a verdict was deleted or the task
    list is not the one sealed, or it is an older sealed state of itself put back
    (`generations.py`); SealKeyError (`seal.check_inputs`) when its inputs were
    edited. `where` names the store in the one-line refusal. Returns whether every seal was
    checked and matched (False: nothing to vouch for, e.g. a store not yet sealed, which the
    writer's `claim` seals, or refuses when another key sealed it). `earlier`: the check of a
    store sealed before its rows' counts were, by `gym eval migrate` (`seal.armed_state`)."""
    key = load_key(create=False)
    found = check_seals(
        con, max_examples=3, earlier=earlier, statistics=not _statistics_checked(con, key)
    )
    seal = found.store
    if seal.state == "stripped":
        held = con.execute("SELECT count(*) FROM rollouts").fetchone()
        if held and held[0]:
            _refuse(where, STRIPPED)
        return False
    if seal.state != "sealed" or found.mismatched is None:
        check_inputs(con, where)
        return False
    if found.mismatched:
        _refuse(
            where,
            f"{found.mismatched} verdicts do not match their seal (e.g. "
            f"{', '.join(found.examples)}): a rollout or verdict was edited",
        )
    assert key is not None  # a sealed check needs it
    deleted = verdicts_deleted(con, key)
    if deleted is not None:
        _refuse(where, deleted)
    check_inputs(con, where)
    if seal.tasks_sealed is False or seal.inputs_sealed is False:
        _refuse(where, "its task list or inputs are not those sealed")
    if seal.rollouts_sealed is False:
        _refuse(where, ROLLOUTS_EDITED)
    if seal.calls_sealed is False:
        _refuse(where, CALLS_EDITED)
    if seal.verdicts_sealed is False:
        _refuse(where, VERDICTS_EDITED)
    if seal.rolled_back or seal.generation_sealed is False:
        _refuse(where, older_state(seal))
    return True


def _statistics_checked(con: DuckDBPyConnection, key: SealKey | None) -> bool:
    """The file's column statistics passed the check already: its bytes are those of a file
    recorded as passing a full check, at any path (`checked_stores.statistics_checked`, whose
    record names the check's version). A record that cannot be read vouches for nothing."""
    try:
        return key is not None and statistics_checked(con, key)
    except SealKeyError:
        return False


def _refuse(where: str, what: str) -> None:
    raise SealsBroken(
        f"{where}: {what}; whatever was built on it would be sealed as it is now, so nothing "
        f"was written (see `gym eval health RUN --verify-seals`)"
    )
