"""The seal: a keyed MAC on every stored verdict, so a store edited by someone without the key
reads as tampered.

Health can check that a verdict agrees with its reward, and `reverify --check` that it is what
the verifier gives again; neither can see a rollout whose output was rewritten to the reference
answer together with its verdict set to pass. The seal binds each verdict (rollout id, verifier
version, status, reward, passed, failure kind, details) to what was judged (the rollout's stored
final text and trajectory) and to where it counts (the rollout's run, task, repeat, status and
failure kind) under a key kept outside the store (`GYMFLOW_SEAL_KEY`, or a key file
in the user's config folder): whoever can write the DuckDB file or the object storage a shard is
published to cannot compute it.

The key and the MAC are `seal_key.py`'s (HMAC-SHA256, truncated to 128 bits, computed in
Python: no key material reaches DuckDB), the message each verdict's seal is the MAC of
`verdict_message.py`'s, the stores this machine sealed `sealed_stores.py`'s, the seals of the
rows, the verdict set and the inputs `sealed_rows.py`'s and `sealed_inputs.py`'s. This module
holds what ties them together: the store's seal record and what each version of it says is
sealed, the writers' claim of a store, and the check of every seal.

Which key sealed a store is in its `meta` table (`seal`: key id, the count of verdicts written
before the store was first sealed, and a MAC of both): a writer holding another key refuses to
write, so one store never mixes keys."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from duckdb import DuckDBPyConnection

from gymflow.core.credentials import SEAL_KEY_ENV
from gymflow.core.errors import UserError
from gymflow.core.same_text import same_text
from gymflow.store.arrow_reads import joined_strings
from gymflow.store.column_statistics import check_statistics
from gymflow.store.generations import (
    fresh_history,
    read_generation,
    recorded_store,
    write_generation,
)
from gymflow.store.named_paths import built_aside as built_aside
from gymflow.store.named_paths import store_names
from gymflow.store.seal_key import SEAL_HEX, SealKey, SealKeyError, as_seals, batches, load_key
from gymflow.store.sealed_inputs import INPUTS_VERSION, inputs_sealed, seal_inputs
from gymflow.store.sealed_rows import (
    MODEL_CALLS,
    ROLLOUTS,
    VERDICTS,
    Fold,
    rows_counted,
    rows_match,
    rows_recorded,
    rows_sealed,
    seal_rows,
    seal_table,
)
from gymflow.store.sealed_stores import (
    remember_store,
    remembered,
    remembered_version,
    store_file,
)
from gymflow.store.store_ids import another_store, another_store_message, stored_store_id
from gymflow.store.unjudged import verdicts_deleted
from gymflow.store.verdict_message import JUDGED, MESSAGE, message_sql

# -- which key sealed a store ----------------------------------------------------------------


SealState = Literal["unsealed", "sealed", "foreign", "stripped"]


@dataclass(frozen=True)
class StoreSeal:
    """What the store's `meta.seal` record says, read against this machine's key."""

    #: `unsealed`: written before the seal (no record, no sealed verdict); `sealed`: by this
    #: machine's key; `foreign`: by a key this machine does not hold (or it holds none);
    #: `stripped`: reads as unsealed or foreign, but this machine sealed the store at this path
    state: SealState
    key_id: str | None
    #: verdicts the store held, unsealed, when it was first sealed: read as "unsealed"
    legacy: int = 0
    #: whether its task list is the one sealed (`armed_state`; None: not checked)
    tasks_sealed: bool | None = None
    #: its seal record says its inputs are sealed (`sealed_inputs.py`): a missing seal of them
    #: is an edit, not an older store
    inputs_required: bool = False
    #: whether its inputs are the ones sealed (`armed_state`; None: not checked, or a store
    #: sealed before they were)
    inputs_sealed: bool | None = None
    #: its seal record says every rollout's identity and outcome is sealed
    #: (`sealed_rows.py`): a missing record of them is an edit, not an older store
    rollouts_required: bool = False
    #: whether its rollouts are the ones sealed (`armed_state`; None: not checked, or a store
    #: sealed before they were)
    rollouts_sealed: bool | None = None
    #: its seal record says every model call is sealed (`sealed_rows.py`), as `rollouts_required`
    calls_required: bool = False
    #: whether its model calls are the ones sealed, as `rollouts_sealed`
    calls_sealed: bool | None = None
    #: whether its verdict set is the one sealed (`sealed_rows.VERDICTS`: `check_seals`; None:
    #: not checked, or a store sealed before it was whose every completed rollout has a verdict)
    verdicts_sealed: bool | None = None
    #: its seal record says the records of its rollouts and model calls carry their row count
    #: under the key (`sealed_rows._text`): one without is an edit, not an older store
    counts_required: bool = False
    #: the version its seal record verifies as under this key (1 to `RECORD_VERSION`); 0 when
    #: no record verifies (none, garbled, another key's): the task list's seal is read by it
    record_version: int = 0
    #: its seal record says the store's generation is sealed (`generations.py`): a missing
    #: record of it is an edit, not an older store
    generation_required: bool = False
    #: its generation (`armed_state`; 0: none stored, as in a store sealed before it existed)
    generation: int = 0
    #: whether its generation record is the one sealed over its seal records (None: not
    #: checked, or none stored by a store sealed before it existed)
    generation_sealed: bool | None = None
    #: the highest generation this machine's writers took the store at its path to (0: none)
    generation_recorded: int = 0
    #: the store's id (`store_ids.py`; None: none, as in a store from before ids), and the ids
    #: recorded at each name its path is reached by (`generations.Recorded.store_ids`; none: no
    #: record, or records from before ids)
    store_id: str | None = None
    store_ids_recorded: tuple[str, ...] = ()

    @property
    def another_store(self) -> bool:
        """Another store than the one this machine's writers last took its path to was put
        there (`store_ids.another_store`)."""
        return self.state == "sealed" and another_store(
            self.store_id, self.store_ids_recorded, self.generation_recorded
        )

    @property
    def rolled_back(self) -> bool:
        """A store put back at its path that is not the latest sealed there: an older state of
        it (its generation is below the one this machine's writers took it to there), or
        another store (`another_store`)."""
        return self.state == "sealed" and (
            self.generation < self.generation_recorded or self.another_store
        )

    @property
    def older_state(self) -> bool:
        """An older sealed state of the store, which only its generation shows: put back at its
        path (`rolled_back`), or given a newer state's generation record, which does not hold
        over its own seal records though each of them does. A seal record edited or removed is
        that record's own failure (its check says which), not this one."""
        if self.rolled_back:
            return True
        return (
            self.generation_sealed is False
            and self.record_version > 0
            and self.tasks_sealed is not False
            and self.inputs_sealed is not False
            and self.rollouts_sealed is not False
            and self.calls_sealed is not False
            and self.verdicts_sealed is not False
        )


#: The seal record version this gymflow writes: what each version says is sealed beside the
#: verdicts and the task list (a version cannot be changed without the key, so a record of
#: version N whose store lacks the seal of what N seals was edited).
RECORD_VERSION = 6
_SEALED_BY_VERSION = {
    1: {},
    2: {"inputs_required": True},  # `sealed_inputs.py`
    3: {"inputs_required": True, "rollouts_required": True},  # `sealed_rows.ROLLOUTS`
    4: {"inputs_required": True, "rollouts_required": True, "calls_required": True},
    # the generation (`generations.py`), and the server's report among the inputs
    5: {
        "inputs_required": True,
        "rollouts_required": True,
        "calls_required": True,
        "generation_required": True,
    },
    # the row count of the rollouts' and model calls' records under the key (`sealed_rows.py`)
    6: {
        "inputs_required": True,
        "rollouts_required": True,
        "calls_required": True,
        "generation_required": True,
        "counts_required": True,
    },
}


def _inputs_versions(record_version: int) -> tuple[int, ...]:
    """The inputs' MAC versions (`sealed_inputs.SEALED_META`) a store whose seal record is of
    `record_version` may hold: only version 2 (the server's report sealed) from record 5 on, so
    an older MAC put back cannot leave the report out; before, either (a record of before 5
    over a version 2 MAC was put back from another store: its task list, sealed under the
    record's version, says so)."""
    return (INPUTS_VERSION,) if record_version >= 5 else (INPUTS_VERSION, 1)


def _required(version: int) -> dict[str, Any]:
    """What a seal record of `version` says is sealed, as `StoreSeal` fields (`Any`: splatted
    into fields not all bools)."""
    return _SEALED_BY_VERSION[version]


#: What a record this key did not write requires (garbled, deleted, naming another key over
#: this key's seals): everything, none of it granted leave to be missing.
_EVERYTHING = _required(RECORD_VERSION)


def _record(key: SealKey, legacy: int, *, version: int = RECORD_VERSION) -> str:
    """The seal record; version 2 says the store's inputs (`sealed_inputs.py`) are sealed too,
    so a store whose record is version 2 and whose inputs seal is gone was edited (version 1,
    written before, says nothing of them; a version cannot be changed without the key);
    version 3 says the same of its rollouts, version 4 of its model calls (`sealed_rows.py`),
    version 5 of its generation (`generations.py`) and the server's report, version 6 of the
    row counts of the rollouts' and model calls' records."""
    body = f"{key.key_id}:{legacy}"
    label = "gymflow store seal " if version == 1 else f"gymflow store seal v{version} "
    return f"{body}:{key.mac(label + body)[:SEAL_HEX]}"


def _has_seal_column(con) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
            "AND table_name = 'verifications' AND column_name = 'seal'"
        ).fetchone()[0]
    )


#: Every stored verdict's id and seal, with the message its seal is the MAC of.
_VERDICT_MESSAGES = (
    f"SELECT v.rollout_id, v.seal, {message_sql('v', 'r')} AS {MESSAGE} FROM {JUDGED}"
)


def _sealed_by(con: DuckDBPyConnection, key: SealKey) -> bool:
    """Whether any stored verdict carries `key`'s seal."""
    if not _has_seal_column(con):
        return False
    for batch in batches(con, _VERDICT_MESSAGES + " WHERE v.seal IS NOT NULL"):
        same = pc.equal(batch.column(1), key.sealer.seals(batch.column(2)))
        if pc.any(same).as_py():
            return True
    return False


STRIPPED = (
    "this machine sealed this store, and it now reads as unsealed or sealed by another key: "
    "its seals or seal record were removed or rewritten in the file (or another store was put "
    "at this path: then move that one to a folder of its own)"
)


def store_seal(con: DuckDBPyConnection, key: SealKey | None) -> StoreSeal:
    """Which key sealed the store `con` (`_seal_record`), and `stripped` when that reads as
    unsealed or foreign at a path this machine's key sealed."""
    found = _seal_record(con, key)
    if found.state in ("unsealed", "foreign") and key is not None and remembered(con, key):
        return StoreSeal("stripped", key.key_id)
    if found.state == "sealed" and key is not None and 0 < found.record_version < RECORD_VERSION:
        # an older record where this machine sealed under a newer one: put back from another
        # store, to switch the check of what the newer one seals off
        sealed_under = remembered_version(con, key)
        if sealed_under > found.record_version:
            return replace(found, **_required(sealed_under))
    return found


def _write_record(con: DuckDBPyConnection, key: SealKey, legacy: int) -> None:
    """The seal record (`RECORD_VERSION`), with the rows of every sealed table the store holds
    no seal of yet (first sealed, or sealed before they were) sealed whole: the record says
    they are."""
    seal_rows(con, key, unrecorded_only=True)
    remember_store(con, key, version=RECORD_VERSION)
    con.execute(
        "INSERT INTO meta VALUES ('seal', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [_record(key, legacy)],
    )
    _write_task_seal(con, key)


def _record_row(con: DuckDBPyConnection) -> tuple[object, ...] | None:
    return con.execute("SELECT value FROM meta WHERE key = 'seal'").fetchone()


def _seal_record(con, key: SealKey | None) -> StoreSeal:
    """Which key sealed the store `con`, and how many of its verdicts predate the seal. A
    record whose MAC does not verify under this machine's key (an edited count) grants no
    verdict leave to be unsealed."""
    row = _record_row(con)
    if row is None:
        sealed_any = (
            _has_seal_column(con)
            and con.execute("SELECT count(*) FROM verifications WHERE seal IS NOT NULL").fetchone()[
                0
            ]
        )
        if not sealed_any:
            return StoreSeal("unsealed", None)
        # seals without a record: the record was deleted; this key checks them, none unsealed,
        # and the inputs' seal is required (deleted with it, the inputs would go unchecked)
        if key is None:
            return StoreSeal("foreign", None)
        return StoreSeal("sealed", key.key_id, **_EVERYTHING)
    key_id, _, rest = str(row[0]).partition(":")
    if key is None:
        return StoreSeal("foreign", key_id)
    if key_id != key.key_id:
        # a record naming another key over seals this key made was edited, to make every
        # check skip them (`seal_key_unknown`, a warning): this key checks them, none unsealed,
        # and the inputs' seal is required
        return (
            StoreSeal("sealed", key.key_id, **_EVERYTHING)
            if _sealed_by(con, key)
            else StoreSeal("foreign", key_id)
        )
    legacy_text = rest.partition(":")[0]
    legacy = int(legacy_text) if legacy_text.isdigit() and len(legacy_text) < 19 else 0
    # newest first: version 4 before its generation was sealed, 3 before its model calls were,
    # 2 before its rollouts were, 1 before its inputs were
    for version in sorted(_SEALED_BY_VERSION, reverse=True):
        if same_text(_record(key, legacy, version=version), str(row[0])):
            return StoreSeal("sealed", key_id, legacy, **_required(version), record_version=version)
    # a record this key did not write (garbled, or its count edited): it grants nothing, and
    # every seal beside the verdicts' is required
    return StoreSeal("sealed", key_id, 0, **_EVERYTHING)


def foreign_key_message(where: str, key_id: str | None, key: SealKey | None) -> str:
    mine = f"this machine's key ({key.source}) is {key.key_id}" if key else "this machine has none"
    return (
        f"{where}: sealed with a key this machine does not hold (key id {key_id}; {mine}); set "
        f"{SEAL_KEY_ENV} to the key that sealed it (on every worker too)"
    )


# -- which tasks a store holds -----------------------------------------------------------------
#
# A verdict's seal covers its rollout, not whether the rollout's task is there at all: a failing
# task deleted with its rollouts, verdicts and calls took pass@1 from 0.75 to 0.90, healthy.
# The store's task list (each run's ids) is sealed too, in `meta.task_seal`, by the writers
# that add tasks (registration, merge, import: `seal_tasks`).


#: The label of the task list's MAC under each seal record version. From version 3 on it names
#: the version, which binds the record to the store: a record of a version before 3 is the same
#: in every store this key sealed then, so one put in place of a store's own (with its rollouts'
#: seal deleted) would switch that seal off; the task list sealed under version 3 then no longer
#: matches (third attacker's pass, a06). The same holds of each version since: a version 3
#: record put in a version 4 store (its model calls' seal deleted) leaves the task list sealed
#: under version 4's label, which no longer matches.
_TASK_LIST_LABELS = {
    1: "gymflow task list\n",
    2: "gymflow task list\n",
    3: "gymflow task list v3\n",
    4: "gymflow task list v4\n",
    5: "gymflow task list v5\n",
    6: "gymflow task list v6\n",
}


def _task_list_mac(con: DuckDBPyConnection, key: SealKey, version: int) -> str:
    runs = con.execute(
        "SELECT run_id, string_agg(task_id, chr(10) ORDER BY task_id) FROM tasks "
        "GROUP BY run_id ORDER BY run_id"
    ).fetchall()
    listing = "\n\n".join(f"{len(str(run))}:{run}\n{ids}" for run, ids in runs)
    return key.mac(_TASK_LIST_LABELS[version] + listing)[:SEAL_HEX]


def _write_task_seal(con: DuckDBPyConnection, key: SealKey) -> None:
    """The task list sealed under the record a writer leaves (`RECORD_VERSION`), and the
    store's generation over both (`generations.py`)."""
    con.execute(
        "INSERT INTO meta VALUES ('task_seal', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [_task_list_mac(con, key, RECORD_VERSION)],
    )
    write_generation(con, key)


def seal_tasks(con: DuckDBPyConnection, key: SealKey) -> None:
    """Seal the task list and the inputs (`sealed_inputs.py`) the store holds now (after a
    writer added tasks or a verifier version, or chose the current one); a store sealed before
    its inputs, rollouts or model calls were gets the record that says they are
    (`_write_record`)."""
    found = _seal_record(con, key)
    if found.state == "sealed" and 0 < found.record_version < RECORD_VERSION:
        _write_record(con, key, found.legacy)
    _write_task_seal(con, key)
    seal_inputs(con, key)


ROLLOUTS_EDITED = (
    "its rollouts' runs, tasks, repeats, statuses, failure kinds, cuts, token counts, counters "
    "or timings are not "
    "those its writers sealed: a rollout edited, added or deleted in the file (a failing "
    "rollout set to failed leaves the scores)"
)
CALLS_EDITED = (
    "its model calls' statuses, failure kinds, latencies, token counts (cached too), sampling, "
    "requests or responses are not those its writers sealed: a call edited, added or deleted "
    "in the file"
)
VERDICTS_EDITED = (
    "its verdicts are not the set its writers sealed: a verdict deleted, added, or moved into "
    "superseded_verifications in the file (a failing verdict gone leaves every score)"
)
TASK_LIST_EDITED = (
    "its task list is not the one its writers sealed: a task (with its rollouts) deleted or "
    "added in the file, or an older store's seal record put in place of its own"
)
GENERATION_EDITED = (
    "its generation record is not the one its writers sealed over its seal records: removed, "
    "edited, or a newer state's record copied into an older state of the store"
)


def older_state(found: StoreSeal) -> str:
    """What a store put back to an older sealed state of itself (`StoreSeal.older_state`) is,
    naming both generations (its caller names the path), or another store put there whose
    generation is not below (which only its id shows), naming both ids."""
    if found.another_store and found.generation >= found.generation_recorded:
        return another_store_message(found.store_id, found.store_ids_recorded)
    if not found.rolled_back:
        return GENERATION_EDITED
    return (
        f"generation {found.generation} of this store, but this machine's writers took the "
        f"store at this path to generation {found.generation_recorded}: an older copy of it "
        "was put back (a copy kept on purpose opens in a folder of its own)"
    )


INPUTS_EDITED = (
    "its tasks, verifier versions, run row, current version or model server's report are not "
    "those its writers sealed: edited in the file"
)


def check_inputs(con, where: str) -> None:
    """Before a writer changes the store's inputs (registers tasks or a verifier version,
    chooses the current version, merges, judges again): refuse (SealKeyError, nothing written)
    when they are not those this machine's key sealed, so an edited answer key or version row is
    never sealed by the next routine write. A store this key did not seal is `claim`'s to judge."""
    key = load_key(create=False)
    if key is None:
        return
    found = store_seal(con, key)
    if found.state != "sealed":
        return
    inputs = inputs_sealed(con, key, _inputs_versions(found.record_version))
    if inputs is False or (inputs is None and found.inputs_required):
        raise SealKeyError(f"{where}: {INPUTS_EDITED}; nothing written")


def task_list_sealed(con: DuckDBPyConnection, key: SealKey, version: int) -> bool:
    """Whether the store's task list is the one its writers sealed (a task deleted or added
    in the file, or the seal removed, is not)."""
    row = con.execute("SELECT value FROM meta WHERE key = 'task_seal'").fetchone()
    if row is None:
        return False
    # `version`: the one the store's record verifies as (`StoreSeal.record_version`); when
    # no record verifies (deleted or garbled: every seal is then required): any label
    versions = (version,) if version else tuple(sorted(_TASK_LIST_LABELS, reverse=True))
    return any(same_text(str(row[0]), _task_list_mac(con, key, v)) for v in versions)


def claim(con: DuckDBPyConnection, where: str, *, legacy_added: int = 0) -> SealKey:
    """The key a writer seals with, armed on `con`, with the store's seal record written (in
    the caller's transaction). A store sealed with another key is refused: one store, one key.
    `legacy_added`: unsealed verdicts the caller just copied in (a shard from before the
    seal), read as written before the seal rather than as tampered."""
    key = load_key(create=True)
    assert key is not None
    found = store_seal(con, key)
    counted = con.execute("SELECT count(*) FROM verifications").fetchone()
    held = counted[0] if counted else 0
    if found.state == "stripped" and held:
        raise SealKeyError(f"{where}: {STRIPPED}; nothing written")
    if found.state == "foreign":
        raise SealKeyError(foreign_key_message(where, found.key_id, key))
    first = found.state in ("unsealed", "stripped")  # stripped of nothing: a failed first write
    if first:
        fresh_history(con)  # a new store at this path: its generation starts above the path's
    # sealed verdicts but no record: copied in from a sealed shard (a merge's first write);
    # the record is written with only what the caller copied in unsealed counted as legacy
    unrecorded = not first and _record_row(con) is None
    legacy = held if first else found.legacy + legacy_added
    if first or legacy_added or unrecorded:
        _write_record(con, key, legacy)
    if first or unrecorded:
        remember_store(con, key)
        seal_tasks(con, key)
    elif not rows_recorded(con, VERDICTS):
        # sealed before its verdict set was: sealed whole now, as the writer's check found it
        # (`sealed_first.py`: no verdict deleted), before the writer adds or sets one aside
        seal_table(con, key, VERDICTS)
    # every writer raises the store's generation, also one that writes no seal record (new
    # verdicts of a version already stored): its state before is then an older one
    write_generation(con, key)
    return key


# -- checking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SealCheck:
    store: StoreSeal
    #: verdicts whose seal does not match (None: not checked, the key is not this machine's)
    mismatched: int | None
    examples: list[str]
    #: the rollout ids of every verdict counted in `mismatched` (health flags each)
    ids: pa.Array | None = None
    #: when every seal was last recomputed and matched, for a check that took that result
    #: (`checked_stores.py`: the file state is the one checked then); None: recomputed now
    checked_at: float | None = None

    @property
    def passed(self) -> bool:
        """Every seal and the inputs' seal matched (what a recorded check needs)."""
        return (
            self.store.state == "sealed"
            and self.mismatched == 0
            and self.store.tasks_sealed is not False
            and self.store.inputs_sealed is not False
            and self.store.rollouts_sealed is not False
            and self.store.calls_sealed is not False
            and self.store.verdicts_sealed is not False
            and self.store.generation_sealed is not False
            and not self.store.rolled_back
        )


class EarlierSealError(UserError):
    """A store this machine's key sealed under an earlier seal record, whose records of its
    rows leave their count outside the key: read by `gym eval migrate` only."""


MIGRATE_COMMAND = "gym eval migrate"


def _counted(con: DuckDBPyConnection, key: SealKey, found: StoreSeal) -> tuple[StoreSeal, bool]:
    """The store's seal as `armed_state` checks it, and whether its rows' records are compared
    with their count under the key. They are not only when its seal record is of a version
    that wrote them with the count in plain text (3 to 5: `sealed_rows._earlier_text`) and no
    record of its rows is one this key wrote with the count keyed: one is (a store sealed under
    version 6 whose older record was put back), and then everything version 6 seals is
    required."""
    if found.counts_required:
        return found, True
    counted = [rows_counted(con, key, spec) for spec in (ROLLOUTS, MODEL_CALLS)]
    if any(counted):
        return replace(found, **_required(RECORD_VERSION)), True
    return found, all(record is None for record in counted)


def earlier_seal_message(where: str, found: StoreSeal) -> str:
    """The one-line refusal of a store sealed under an earlier record (`armed_state`), naming
    the command that migrates it, with its run folder."""
    return (
        f"{where}: sealed by an earlier gymflow (seal record version {found.record_version}), "
        "whose records of its rollouts and model calls leave their row count outside the key "
        f"(two more copies of a sealed row pass them); run `{MIGRATE_COMMAND} "
        f"{Path(where).parent}` to check every seal of it in full and seal it as this gymflow does"
    )


def armed_state(
    con: DuckDBPyConnection, *, rows_matched: bool = False, earlier: bool = False
) -> tuple[StoreSeal, SealKey | None]:
    """Which key sealed the store, and this machine's key when it is that one (the seals can
    then be checked). Never makes a key: a check without one says so. `rows_matched`: the
    store's file is one whose every seal was recomputed and matched, unchanged since
    (`checked_stores.py`): the records of its rollouts and model calls are taken as matching
    rather than recomputed (every row of both tables: most of a check's cost).

    A store this key sealed under a record whose rows' counts are unkeyed (versions 3 to 5) is
    refused (EarlierSealError, naming `gym eval migrate`): its rows' seal cannot tell two more
    copies of a row. `earlier`: that command's full check, which compares those records as
    they were written before it seals them anew."""
    found = store_seal(con, key := load_key(create=False))
    if found.state != "sealed" or key is None:
        return found, None
    found, counted = _counted(con, key, found)
    if not counted and not earlier:
        raise EarlierSealError(earlier_seal_message(store_file(con) or "gymflow.duckdb", found))
    inputs = inputs_sealed(con, key, _inputs_versions(found.record_version))
    if inputs is None and found.inputs_required:
        inputs = False  # the seal of the inputs was removed
    generation = read_generation(con, key)
    at_path = recorded_store(key, store_names(con))
    generation_sealed = generation.sealed
    if generation_sealed is None and found.generation_required:
        generation_sealed = False  # its record was removed
    rows: dict[str, bool | None] = {}
    for name, spec, required in (
        ("rollouts", ROLLOUTS, found.rollouts_required),
        ("calls", MODEL_CALLS, found.calls_required),
    ):
        if rows_matched:
            rows[name] = True if rows_recorded(con, spec) else None
        else:
            rows[name] = rows_sealed(con, key, spec, counted=counted)
        if rows[name] is None and required:
            rows[name] = False  # their seal was removed
    return replace(
        found,
        tasks_sealed=task_list_sealed(con, key, found.record_version),
        inputs_sealed=inputs,
        rollouts_sealed=rows["rollouts"],
        calls_sealed=rows["calls"],
        # the verdict set's record is compared with the seals `check_seals` recomputes, in the
        # same pass; a file whose every seal matched held the record it has now
        verdicts_sealed=True if rows_matched and rows_recorded(con, VERDICTS) else None,
        generation=generation.number,
        generation_sealed=generation_sealed,
        generation_recorded=at_path.number,
        store_id=stored_store_id(con),
        store_ids_recorded=at_path.store_ids,
    ), key


def _mismatched(
    con: DuckDBPyConnection, key: SealKey, legacy: int
) -> tuple[Any, tuple[int, bytes]]:
    """The rollout ids of the verdicts whose seal is not the one their fields and rollout give
    under `key` (an unsealed verdict counts when more are unsealed than predate the seal), and
    the count and XOR of every verdict's seal as recomputed: the verdict set's record
    (`sealed_rows.VERDICTS`), folded in the same pass."""
    sealer = key.sealer
    found: list[Any] = []
    unsealed: list[Any] = []
    fold = Fold()
    for batch in batches(con, _VERDICT_MESSAGES):
        ids, stored = batch.column(0), batch.column(1)
        digests = sealer.digests(batch.column(2))
        fold.add(digests)
        again = as_seals(digests)
        # a NULL seal compares as NULL, which `filter` drops: the unsealed are counted apart
        found.append(ids.filter(pc.not_equal(stored, again)))
        unsealed.append(ids.filter(pc.is_null(stored)))
    if sum(len(part) for part in unsealed) > legacy:
        found += unsealed
    return joined_strings(found), fold.folded


def _verdict_set(
    con: DuckDBPyConnection, key: SealKey, recomputed: tuple[int, bytes]
) -> bool | None:
    """Whether the store's verdicts are the set its writers sealed: its record against the
    seals just recomputed. A store sealed before the record has none (its generation, sealed
    over it since, says so: `generations.OPTIONAL`), and then a completed rollout without a
    verdict that no reverify set aside (`unjudged.verdicts_deleted`) is the deletion it shows;
    None: none."""
    matched = rows_match(con, key, VERDICTS, recomputed)
    if matched is not None:
        return matched
    return False if verdicts_deleted(con, key) is not None else None


def check_seals(
    con: DuckDBPyConnection,
    max_examples: int = 10,
    *,
    earlier: bool = False,
    statistics: bool = True,
) -> SealCheck:
    """Recompute every verdict's seal (reads the store, writes nothing); `earlier`: as
    `armed_state`. A store whose column statistics misstate a value it holds is refused first
    (StoreError, `column_statistics.py`): every query would answer from them, the seals' too;
    `statistics=False` for a file whose bytes passed that check already."""
    found, key = armed_state(con, earlier=earlier)
    if statistics and found.state == "sealed" and key is not None:
        check_statistics(con, store_file(con) or "gymflow.duckdb")
    if found.state == "stripped":
        ids = joined_strings(
            [b.column(0) for b in batches(con, "SELECT rollout_id FROM verifications")]
        )
    elif found.state == "sealed" and key is not None:
        ids, recomputed = _mismatched(con, key, found.legacy)
        found = replace(found, verdicts_sealed=_verdict_set(con, key, recomputed))
    else:
        return SealCheck(found, None, [])
    examples = pc.take(ids, pc.sort_indices(ids)[:max_examples]).to_pylist()
    return SealCheck(found, len(ids), examples, ids)
