"""Which collection of a run a shard belongs to.

A run id is the config's fingerprint: "the same experiment", for history and comparisons. Two
invocations of `gym eval run` of one config (Monday's nightly and Tuesday's) are two
collections of that run: each gets a collection id when it is planned, and its shards live
under it (`ROOT/RUN_ID/COLLECTION/shard-I-of-N`), so a later collection never restores an
earlier one's shards (attack pass 8, F3). A continuation (`--resume`, a Prefect retry of the
flow or of a shard, a worker running a shard) carries the id it continues.

Domain code: no Prefect; the flow (`flows/eval_run.py`) decides which collection it runs."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from gymflow.core.config import COLLECTION_PATTERN, EvalConfig
from gymflow.store.db import StoreError, connect, store_path
from gymflow.store.remote import Remote, is_url
from gymflow.store.runs import has_run, run_info

_COLLECTION = re.compile(COLLECTION_PATTERN)


def new_collection(when: datetime, token: str | None = None) -> str:
    """A collection id planned at `when` (UTC); `token` (8 hex digits) fixes its random part,
    as a flow run's id does so that a retry of the flow run names the same collection."""
    return f"c{when:%Y%m%dT%H%M%S}-{token or secrets.token_hex(4)}"


def flow_run_collection(scheduled: datetime | None, flow_run_id: object | None) -> str:
    """The collection a flow run plans, named after it: its scheduled start (which Prefect
    keeps across retries of the flow run) and the random tail of its id, so every retry of it
    names the same collection and no other flow run does. Outside a flow run: a new one."""
    when = (scheduled or datetime.now(UTC)).astimezone(UTC)
    token = str(flow_run_id).replace("-", "")[-8:] if flow_run_id else None
    return new_collection(when, token)


def is_collection(name: str) -> bool:
    return _COLLECTION.match(name) is not None


def collections_at(run_root: str) -> list[str]:
    """The collections of one run under a shard root (`ROOT/RUN_ID`), oldest first. Folders of
    an earlier gymflow (`shard-I-of-N`, with no collection) are not collections."""
    return sorted(name for name in _folders(run_root) if is_collection(name))


def legacy_shards_at(run_root: str) -> list[str]:
    """The shards written before collections, directly under `ROOT/RUN_ID` (`shard-I-of-N`):
    never continued, only merged by hand (`gym eval aggregate`)."""
    found = _folders(run_root)
    return sorted(f"{run_root.rstrip('/')}/{n}" for n in found if n.startswith("shard-"))


def _folders(run_root: str) -> set[str]:
    """The names of the folders directly under `run_root` (a path or a URL)."""
    if is_url(run_root):
        return {name.split("/", 1)[0] for name in Remote(run_root).find("") if "/" in name}
    folder = Path(run_root)
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def collection_of(config_json: str | None) -> str | None:
    """The collection a stored run's config names (None: unsharded, or an earlier gymflow's)."""
    if not config_json:
        return None
    try:
        return EvalConfig.model_validate_json(config_json).shard.collection
    except ValidationError:
        return None


def recorded_collection(run_dir: Path | str) -> str | None:
    """The collection the run store at `run_dir` was merged from, if it holds one."""
    path = store_path(run_dir)
    if is_url(str(run_dir)) or not path.exists():
        return None
    try:
        with connect(path, read_only=True) as con:
            return collection_of(run_info(con).config_json) if has_run(con) else None
    except StoreError:
        return None
