"""A pinned baseline: the store every regression gate under a root compares with, named by its
identity and recorded beside the seal key.

Unpinned, the gate compares with the earliest run under the root that this machine sealed there
(`counted.py`). Whoever can write the root can delete or move that run, and the next earliest
becomes the baseline without a word: a weaker one passes a drop. `--baseline PATH` names a path,
which holds whatever store is put there. A pin names the store: `gym runs pin RUN --root ROOT`
records the root, the run's folder, its store id (`store/store_ids.py`) and generation, and
when, each under one MAC of the seal key (`SealKey.mac`, as the stores' generations and checked
stores are recorded). Every later gate under the root compares with that store only. Its run
missing (deleted, moved), another store or an older state of it at its path, or the record
edited, forged or made with another key: the gate fails in one line naming the record, the path
and both ids, and never falls back to another run.

The record lives in `pinned-baselines/` beside the key (one owner-only file per root, named by
the root's path), not in the root: a file in the root, deleted by anyone who can write there,
would turn a pinned gate back into an unpinned one."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, cast

import duckdb

from gymflow.core.bounded_files import FileBoundError, open_bounded
from gymflow.core.errors import GymflowError, UserError
from gymflow.core.json_text import parse
from gymflow.core.same_text import same_text
from gymflow.core.user_folders import user_config, write_private
from gymflow.store.db import connect, store_path
from gymflow.store.generations import recorded_store_at, stored_number
from gymflow.store.named_paths import path_names
from gymflow.store.seal_key import SealKey, load_key
from gymflow.store.store_ids import another_store, stored_store_id

_LABEL = "gymflow pinned baseline v1\n"
#: Past this, a file is no record gymflow wrote (one is about 400 bytes).
MAX_BYTES = 1 << 14
#: How every message says to pin again.
REPIN = "gym runs pin RUN --root"


class PinError(UserError):
    """A baseline that cannot be pinned (not sealed here, no store id), or a pin record that
    cannot be written or removed."""


@dataclass(frozen=True, slots=True)
class Pin:
    """What a pin record says: the store pinned as the gate's baseline under `root`."""

    #: the root as the gate names it (absolute; one record per name: `path_names`)
    root: str
    #: the baseline's run folder (absolute)
    baseline: str
    store_id: str
    #: the store's generation when pinned (`store/generations.py`): an older state is below it
    generation: int
    #: UTC, ISO 8601
    pinned_at: str
    #: the seal key it is MAC'd with (`SealKey.key_id`)
    key_id: str

    def mac(self, key: SealKey) -> str:
        return key.mac(_LABEL + json.dumps(asdict(self), sort_keys=True))


_FIELDS = {f.name: f.type for f in fields(Pin)}


def folder() -> Path:
    """`pinned-baselines/` beside the seal key."""
    return user_config("pinned-baselines")


def pin_file(root_name: str) -> Path:
    """The record of the root named `root_name` (absolute)."""
    return folder() / hashlib.sha256(root_name.encode()).hexdigest()[:40]


@dataclass(frozen=True, slots=True)
class Pinned:
    """What the records say of a root: its pin (None: none), or why a record is refused."""

    pin: Pin | None = None
    record: Path | None = None
    #: one line: why the record is not taken (empty: taken, or none)
    refused: str = ""


def _refused(file: Path, root: str, why: str) -> Pinned:
    return Pinned(
        record=file,
        refused=(
            f"pin record {file} for {root} refused: {why}; remove it with `gym runs pin --root "
            f"{root} --remove` and pin the baseline again"
        ),
    )


def _parsed(text: bytes) -> tuple[Pin, str] | None:
    """The pin and MAC a record's text holds, each field of its type; None: not a record."""
    try:
        document = parse(text)
    except ValueError:  # not JSON, or nested past Python's recursion
        return None
    if not isinstance(document, dict) or set(document) != {*_FIELDS, "mac"}:
        return None
    values = cast("dict[str, Any]", document)
    mac = values.pop("mac")
    typed = all(type(values[name]) is (int if name == "generation" else str) for name in _FIELDS)
    return (Pin(**values), mac) if typed and isinstance(mac, str) else None


def _read(file: Path, root: str, key: SealKey | None) -> Pinned:
    """The record at `file` of the root named `root`, checked: owner-only, gymflow's fields,
    made with this machine's key for this root, its MAC holding."""
    try:
        with open_bounded(file, MAX_BYTES) as handle:
            info = os.fstat(handle.fileno())
            text = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return Pinned()
    except (OSError, FileBoundError) as exc:
        return _refused(file, root, f"cannot be read ({exc})")
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        mode = f"{stat.S_IMODE(info.st_mode):04o}"
        return _refused(file, root, f"not owner-only (uid {info.st_uid}, mode {mode})")
    parsed = _parsed(text)
    if parsed is None:
        return _refused(file, root, "not a pin record gymflow wrote")
    pin, mac = parsed
    if key is None:
        return _refused(file, root, "no seal key on this machine to check it with")
    if pin.key_id != key.key_id:
        return _refused(file, root, f"made with another seal key ({pin.key_id}, not {key.key_id})")
    if not same_text(mac, pin.mac(key)):
        return _refused(file, root, "its MAC does not hold under the seal key: edited or forged")
    if pin.root != root:
        return _refused(file, root, f"the record of another root ({pin.root})")
    return Pinned(pin, file)


def read_pin(root: Path | str) -> Pinned:
    """The pin of `root` (by its path as named and as it resolves: the latest pinned), or the
    first record of it that is refused."""
    key = load_key(create=False)
    found = [_read(pin_file(name), name, key) for name in path_names(root)]
    refused = [p for p in found if p.refused]
    if refused:
        return refused[0]
    pins = [p for p in found if p.pin is not None]
    return max(pins, key=lambda p: p.pin.pinned_at if p.pin else "", default=Pinned())


@dataclass(frozen=True, slots=True)
class Found:
    """The store at a pinned baseline's path: its id (None: none, or no store) and why it is
    not the pinned store (empty: it is)."""

    store_id: str | None
    why: str = ""


def found_at(run_dir: str, store_id: str, generation: int) -> Found:
    """Whether the store in `run_dir` is the store pinned (`store_id`), in its pinned state
    (`generation`) or later, and the one this machine's writers last recorded there. Its seals
    are the gate's to check, with health."""
    store = store_path(run_dir)
    if not os.path.lexists(store):
        return Found(None, "no store there (deleted or moved)")
    try:
        with connect(run_dir, read_only=True) as con:
            held_id, number = stored_store_id(con), stored_number(con)
    except (GymflowError, duckdb.Error) as exc:
        return Found(None, f"its store cannot be read ({exc})")
    if held_id != store_id:
        return Found(held_id, "another store")
    if number < generation:
        return Found(held_id, f"an older state of it (generation {number}, pinned at {generation})")
    key = load_key(create=False)
    recorded = recorded_store_at(key, store) if key is not None else None
    if recorded is not None and another_store(held_id, recorded.store_ids, recorded.number):
        ids = " and ".join(recorded.store_ids) or "none"
        return Found(held_id, f"this machine's writers recorded store id {ids} there since")
    return Found(held_id)


@dataclass(frozen=True, slots=True)
class BaselineChoice:
    """Which run a gate compared with and how it was chosen: stated by the gate's output, its
    JSON, gate.json and the run's report."""

    #: the root the gate read (absolute)
    root: str
    #: the baseline's run folder (None: none to compare with)
    run_dir: str | None
    #: the root's pinned baseline (`gym runs pin`)
    pinned: bool
    #: how it was chosen, in words
    chosen: str
    #: the pin record, the store id and generation it names, and when it was made (pinned only)
    record: str | None = None
    store_id: str | None = None
    generation: int | None = None
    pinned_at: str | None = None
    #: why the pin does not hold, one line naming the record, the path and both ids (empty: it
    #: holds, or none): the gate fails, never comparing with another run
    refused: str = ""

    @classmethod
    def unpinned(cls, root: Path, run_dir: Path | str | None, chosen: str) -> Self:
        return cls(str(root), None if run_dir is None else str(run_dir), False, chosen)

    def line(self) -> str:
        """The baseline, stated in one line after the gate's verdict."""
        if self.refused:
            return f"baseline: none compared: {self.refused}"
        if self.pinned:
            return (
                f"baseline: {self.run_dir}, pinned (store id {self.store_id}, generation "
                f"{self.generation}, {self.pinned_at}; record {self.record})"
            )
        if self.run_dir is None:
            return f"baseline: none ({self.chosen}); not pinned"
        return (
            f"baseline: {self.run_dir}, not pinned: {self.chosen} (pin it: gym runs pin "
            f"{self.run_dir} --root {self.root})"
        )


def pinned_baseline(root: Path, given: Path | None) -> BaselineChoice | None:
    """The root's pinned baseline, checked now (None: no pin). Refused, one line, when its
    record is refused, the store at its path is not the store pinned, or `given` (a
    `--baseline`) names another run."""
    pinned = read_pin(root)
    record = str(pinned.record) if pinned.record is not None else None
    if pinned.refused:
        return BaselineChoice(str(root), None, True, "pinned", record, refused=pinned.refused)
    pin = pinned.pin
    if pin is None:
        return None
    choice = BaselineChoice(
        str(root), pin.baseline, True, "pinned", record, pin.store_id, pin.generation,
        pin.pinned_at,
    )  # fmt: skip
    if given is not None and os.path.realpath(given) != os.path.realpath(pin.baseline):
        return _broken(
            choice,
            f"--baseline {given} is not the baseline pinned under {root} ({record}: "
            f"{pin.baseline}, store id {pin.store_id}); leave --baseline out, or pin it: "
            f"{REPIN} {root}",
        )
    return held(choice)


def held(choice: BaselineChoice) -> BaselineChoice:
    """`choice`, refused if it is pinned and the store at its path is not (any more) the store
    pinned: the gate checks before and after it reads the baseline."""
    if not choice.pinned or choice.refused or choice.run_dir is None or choice.store_id is None:
        return choice
    found = found_at(choice.run_dir, choice.store_id, choice.generation or 0)
    if not found.why:
        return choice
    return _broken(
        choice,
        f"the pinned baseline {choice.run_dir} is not the store pinned ({choice.record}): "
        f"pinned store id {choice.store_id} (generation {choice.generation}, "
        f"{choice.pinned_at}), found {found.store_id or 'none'}: {found.why}; put it back, or "
        f"pin another: {REPIN} {choice.root}",
    )


def _broken(choice: BaselineChoice, why: str) -> BaselineChoice:
    return replace(choice, refused=why)


def record_pin(root: Path, baseline: Path) -> tuple[Pin, Pinned]:
    """Pin the store in `baseline` for every gate under `root` (replacing the root's pin);
    returns it and what the root's record said before. The caller has checked its seals
    (`gate.pin`); refused (PinError) unless it holds a store id, the one this machine's writers
    recorded at its path (a copy made by hand elsewhere has none recorded there)."""
    key = load_key(create=False)
    if key is None:
        raise PinError(f"{baseline}: not pinned: no seal key on this machine (nothing it sealed)")
    store = store_path(baseline)
    with connect(baseline, read_only=True) as con:
        held_id, number = stored_store_id(con), stored_number(con)
    if held_id is None:
        raise PinError(
            f"{store}: not pinned: its store holds no store id (sealed before ids); its next "
            f"gymflow write gives it one (e.g. `gym eval use-version {baseline} VERSION` with "
            "the version it is read under now)"
        )
    # recorded at each name the path is reached by (a link: as named and as it resolves)
    recorded = recorded_store_at(key, store)
    if not recorded.store_ids or another_store(held_id, recorded.store_ids, recorded.number):
        raise PinError(
            f"{store}: not pinned: this machine's writers recorded store id "
            f"{' and '.join(recorded.store_ids) or 'none'} at this path, and it holds {held_id} "
            "(a copy made by hand, or another's run): pin a run where gymflow wrote it"
        )
    before = read_pin(root)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    pins = [
        Pin(name, os.path.abspath(baseline), held_id, number, now, key.key_id)
        for name in path_names(root)
    ]
    for pin in pins:
        file = pin_file(pin.root)
        try:
            write_private(file, json.dumps({**asdict(pin), "mac": pin.mac(key)}) + "\n")
        except OSError as exc:
            raise PinError(f"{file}: cannot record the pin: {exc}") from None
    return pins[0], before


def remove_pin(root: Path) -> list[Path]:
    """Remove the root's pin records (refused ones too: the owner's way out of one); returns
    those removed."""
    removed = []
    for name in path_names(root):
        file = pin_file(name)
        try:
            file.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise PinError(f"{file}: cannot remove the pin: {exc}") from None
        removed.append(file)
    return removed
