"""Completed rollouts without a live verdict, and which of them are honest.

Every gymflow writer stores a rollout with its verdict, so a completed rollout without any was
judged once and its verdict deleted, except where a reverify set it aside to judge again (an
errored verdict, or with `--failed-only` one carried from its base version: `rejudged_sql`)
and its seal still matches its rollout, or where an import stored a row without a reward
(never judged, and sealed as such: `sealed_inputs.unjudged_sealed`). What the writers refuse
before they write (`sealed_first.py`), and what the readers of a store sealed before its
verdict set was (`seal.check_seals`) read as a deletion: sealed passes and failures moved into
`superseded_verifications` read as honest, the failures gone from every score (attack pass 7,
s03)."""

from __future__ import annotations

from typing import Any, Protocol

from duckdb import DuckDBPyConnection

from gymflow.store.arrow_reads import arrow_batches, pc
from gymflow.store.sealed_inputs import imported_only, unjudged_sealed
from gymflow.store.verdict_message import MESSAGE, message_sql


class SealKey(Protocol):
    """What telling a set-aside verdict's seal needs of `seal.SealKey` (which imports this
    module)."""

    @property
    def sealer(self) -> Any: ...

    @property
    def key_id(self) -> str: ...

    def mac(self, text: str) -> str: ...


#: Verification failure kinds a second judgement may settle (a verifier crash, a judge or a
#: sandbox that timed out or failed).
REJUDGED_STATUSES = ("error",)


def rejudged_sql(alias: str = "", *, carried: bool = True) -> str:
    """A verdict (of table `alias`) that a reverify sets aside to judge again: one that errored,
    and with `carried`, one a `--failed-only` reverify copied from its base version. No other
    verdict is ever set aside: one in `superseded_verifications` is a verdict moved there."""
    column = f"{alias}." if alias else ""
    statuses = ", ".join(f"'{status}'" for status in REJUDGED_STATUSES)
    found = f"{column}status IN ({statuses})"
    if carried:
        found += f" OR json_extract_string({column}details_json, '$.carried_from') IS NOT NULL"
    return f"({found})"


#: Completed rollouts with no live verdict, and whether a verdict set aside for them to be
#: judged again carries a seal that still matches (the message its seal is the MAC of).
_UNJUDGED = f"""
    SELECT r.rollout_id, s.seal, {message_sql("s", "r")} AS {MESSAGE}
    FROM rollouts r
    LEFT JOIN superseded_verifications s
        ON s.rollout_id = r.rollout_id AND {rejudged_sql("s")}
    WHERE r.status = 'completed'
      AND NOT EXISTS (SELECT 1 FROM verifications v WHERE v.rollout_id = r.rollout_id)
"""


def verdicts_deleted(con: DuckDBPyConnection, key: SealKey) -> str | None:
    """What says a verdict was deleted: completed rollouts without any verdict, none of whose
    set-aside verdicts still match their seal; in an import, other rollouts without a verdict
    than the ones it sealed as stored so (`sealed_inputs.unjudged_sealed`). None: none was."""
    if imported_only(con):
        changed = unjudged_sealed(con, key)
        if changed is None:
            return None  # the import's rows without a reward, as it stored them: judging is new
        stored, now = changed
        return (
            f"{now} completed rollouts have no verdict, where the import stored {stored} "
            "without one: verdicts were deleted"
        )
    honest: set[str] = set()
    seen: set[str] = set()
    for batch in arrow_batches(con, _UNJUDGED):
        ids, stored = batch.column(0), batch.column(1)
        again = key.sealer.seals(pc.fill_null(batch.column(2), b""))
        seen.update(ids.to_pylist())
        honest.update(ids.filter(pc.fill_null(pc.equal(stored, again), False)).to_pylist())
    deleted = sorted(seen - honest)
    if not deleted:
        return None
    return (
        f"{len(deleted)} completed rollouts once judged have no verdict (e.g. "
        f"{', '.join(deleted[:3])}): verdicts were deleted"
    )
