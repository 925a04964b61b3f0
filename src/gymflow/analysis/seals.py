"""Whether the store a number is read from is the one its writers sealed, as health checks it
(`store/checked_stores.check_seals_once`: recomputed, unless this file is unchanged since every
seal matched). `gym eval profile A --compare B` printed a clean difference for a forged B
(second attacker's pass over 2a91e13, §11): a number read from a store is given with what its
seals say."""

from __future__ import annotations

from datetime import UTC, datetime

from gymflow.analysis.results import Seals
from gymflow.core.errors import UserError
from gymflow.store.checked_stores import check_seals_once
from gymflow.store.seal import SealCheck, older_state


class SealsFailed(UserError):
    """A store whose seals do not match what it holds: none of its numbers is read."""


#: Verdicts a mismatch names at most.
EXAMPLES = 3


def seal_check(con) -> SealCheck:
    """The seal check of the store `con` an analysis makes (once per file state:
    `store.checked_stores`); StoreError when its column statistics misstate its values."""
    return check_seals_once(con, max_examples=EXAMPLES)


def store_seals(con, found: SealCheck | None = None) -> Seals:
    """What the seals of the store `con` say: which key sealed it, and what does not match;
    from the check `found` (of `con`, made in this analysis) when given, else checked here."""
    if found is None:
        found = seal_check(con)
    store = found.store
    edited = []
    if store.state == "stripped":
        edited.append(f"{found.mismatched} verdicts lost their seals")
    elif found.mismatched:
        examples = ", ".join(found.examples[:EXAMPLES])
        edited.append(f"{found.mismatched} verdicts do not match their seal (e.g. {examples})")
    for sealed, what in (
        (store.tasks_sealed, "the task list"),
        (store.inputs_sealed, "the inputs (tasks, run row, verifier versions, current version)"),
        (store.rollouts_sealed, "the rollouts' statuses, tasks, repeats or counts"),
        (store.calls_sealed, "the model calls' statuses, latencies, tokens or bodies"),
        (store.verdicts_sealed, "the verdict set (a verdict deleted, added or moved aside)"),
    ):
        if sealed is False:
            edited.append(f"{what} not as sealed")
    if store.older_state:
        edited.append(older_state(store))
    checkable = store.state in ("sealed", "stripped") and found.mismatched is not None
    return Seals(
        state=store.state,
        intact=(not edited) if checkable else None,
        edited=edited,
        checked_at=None
        if found.checked_at is None
        else datetime.fromtimestamp(found.checked_at, UTC).replace(microsecond=0),
    )


def intact_or_refused(con, store: object) -> Seals:
    """`store_seals`, or SealsFailed naming `store` and what does not match: for a command whose
    output is chosen by the store's numbers (a selection of tasks, training data), which a
    forged store would choose (`gym data select` kept 0 of 2 tasks from a forged copy)."""
    seals = store_seals(con)
    if seals.intact is False:
        raise SealsFailed(
            f"{store}: its seals fail ({'; '.join(seals.edited)}): edited after gymflow sealed "
            "it; nothing read from it (`gym eval health` lists what)"
        )
    return seals


#: What a state other than `sealed` means for a store that would name where to send credentials.
_UNTRUSTED = {
    "foreign": "sealed with a key this machine does not hold",
    "unsealed": "never sealed",
    "stripped": "stripped of its seals",
}


def own_or_refused(con, store: object, act: str, remedy: str) -> Seals:
    """`intact_or_refused`, and SealsFailed too unless this machine's key sealed `store`: for a
    command that acts on what the store names, `act` (a rerun calls the model server its
    stored config names, with this machine's credentials), which a store from anyone would
    name (attack pass 5: a run someone sent sent the owner's API key to its server); `remedy`
    says what to do instead."""
    seals = intact_or_refused(con, store)
    if seals.intact is not True:
        whose = _UNTRUSTED.get(seals.state, seals.state)
        raise SealsFailed(
            f"{store}: {act}, and this store is {whose}: only a store this machine sealed may "
            f"name them ({remedy})"
        )
    return seals
