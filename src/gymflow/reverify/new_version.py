"""Reverify: new rewards for stored rollouts under changed verifier parameters, without inference.

The environment is reloaded by the name the run recorded; each task is taken from the run's
benchmark, never from the store's copy (which may hold code a verifier runs: `task_source.py`),
after checking the store's copy is the benchmark's; each completed rollout's stored output and
trajectory go through the environment's resources server with the new parameters. The result is
a new verifier version stored beside the old ones: nothing is overwritten, and the policy model
is never called (an LLM judge inside a verifier may be). Verification is the collector's
(`ResourcesServer.verify_many`): a verifier with a bound runs in the worker pool, where one that
hangs is killed and its rollout recorded as `verifier_timeout` (or, for one running the answer's
code, as the answer failing), so a reverify always finishes.

With `failed_only`, only rollouts the base version did not pass are judged again; the base
version's passing verdicts are carried into the new version (marked `carried_from`), so the new
version is complete and every analysis can read it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml

from gymflow.analysis.outcomes import REVERIFY_SOURCE
from gymflow.analysis.profile import headline
from gymflow.analysis.results import Headline, Result
from gymflow.analysis.seals import own_or_refused
from gymflow.core import bounded_yaml
from gymflow.core.credentials import named_servers
from gymflow.core.errors import UserError
from gymflow.core.records import Verification
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment, VerifierRef
from gymflow.environments.registry import RegistryError, load_environment
from gymflow.environments.resources import ResourcesServer
from gymflow.reverify.task_source import trusted_tasks
from gymflow.store import verifier_versions
from gymflow.store.db import connect, memory_capped_call, store_path, transaction
from gymflow.store.queries.verdicts import (
    REJUDGE_SOURCE,
    carry_passing,
    flipped_rollouts,
    flipped_tasks,
    new_version_source,
    versions_newest_first,
)
from gymflow.store.rows import verification_row
from gymflow.store.runs import RunInfo, run_info
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.sealed_first import check_before_writing
from gymflow.store.superseded import supersede_verifications
from gymflow.store.writer import (
    STAGED_VERDICTS,
    insert_staged,
    register_verifier_version,
    stage_verdicts,
)
from gymflow.verifiers.base import VerifyInput
from gymflow.verifiers.identity import code_hash, with_code

#: rollouts read, verified and written per round trip (an insert costs ~20 us a row at 5,000
#: and ~11 us at 50,000: the primary-key index favours big batches)
BATCH = 50_000


class ReverifyError(UserError):
    """A reverify that cannot run; nothing was written."""


def _stored_json(
    raw: str | None, kind: type, store: Path, row: str, column: str, loads=json.loads
) -> Any:
    """A JSON value read back from the store (`kind()` when NULL or empty): an edited or corrupt
    one is a ReverifyError naming the store, the row and the column, never a traceback."""
    if not raw:
        return kind()
    try:
        value = loads(raw)
    except ValueError as exc:  # not JSON, or an integer past Python's digit limit
        raise ReverifyError(f"{store}: {row}: {column} is not JSON ({exc})") from None
    if not isinstance(value, kind):
        raise ReverifyError(
            f"{store}: {row}: {column} holds a JSON {type(value).__name__}, "
            f"not a JSON {'object' if kind is dict else 'array'}"
        )
    return value


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings to a params dict; values are YAML scalars (`3`, `true`, `loose`)."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ReverifyError(f"--set {pair!r}: expected KEY=VALUE, e.g. mode=loose")
        try:
            settings[key.strip()] = bounded_yaml.safe_load(raw) if raw.strip() else ""
        except bounded_yaml.YamlNumberError as exc:
            raise ReverifyError(f"--set {key.strip()}: {exc}") from None
        except yaml.YAMLError as exc:
            raise ReverifyError(f"--set {pair!r}: value is not a YAML scalar: {exc}") from None
    return settings


@dataclass(frozen=True, slots=True)
class _Base:
    version: str
    params: dict[str, Any]
    stored: bool  # False: the store has no version of this verifier (e.g. an imported run)


def _base_version(
    con, store: Path, verifier_name: str, defaults: dict[str, Any], requested: str | None
):
    """The version reverify starts from (flips are counted against it) and the parameters the
    `--set` values override: the requested version, else the current one (what the run is read
    under) when it is the environment's verifier, else the newest version of the environment's
    verifier, else (an imported run) the newest version of any verifier with the manifest's
    default parameters."""
    rows = versions_newest_first(con)
    if requested is None and rows:
        requested = verifier_versions.current_verifier_version(con)
        if next(row[1] for row in rows if row[0] == requested) != verifier_name:
            requested = None
    if requested is not None:
        match = [row for row in rows if row[0] == requested]
        if not match:
            known = ", ".join(row[0] for row in rows) or "none"
            raise ReverifyError(f"no verifier version {requested!r} in this store (have: {known})")
        version, name, params = match[0]
        if name != verifier_name:
            return _Base(version, dict(defaults), True)
        return _Base(version, stored_params(params, store, version), True)
    for version, name, params in rows:
        if name == verifier_name:
            return _Base(version, stored_params(params, store, version), True)
    # Nothing of this verifier stored (an imported run): compare with the newest version there is.
    if rows:
        return _Base(rows[0][0], dict(defaults), True)
    return _Base("", dict(defaults), False)


def stored_params(raw: str | None, store: Path, version: str) -> dict[str, Any]:
    return _stored_json(raw, dict, store, f"verifier version {version}", "params_json")


def store_named_servers(params: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The servers `params` name that the user did not (`given`, `--set`): the store named them,
    and a verifier built from `params` calls them with the keys they name. Only a store this
    machine sealed may (attack pass 5: a run someone sent named its own judge URL and the
    owner's JUDGE_KEY variable, and `reverify --check` sent the key there)."""
    mine = set(named_servers(given))
    return sorted({url for url in named_servers(params) if url not in mine})


def run_server(run: RunInfo, *, trusted: bool) -> str | None:
    """The resources server the run's stored config names (a NeMo Gym server is asked there
    first), only for a store this machine sealed (`trusted`: the caller's seal check says so);
    else None, and the environment's own server is started. A store from anyone names its own
    server, which then judged every stored rollout: `reverify --check` of a run someone sent
    said "6 agree" from the sender's server (attack pass 6, s21)."""
    url = json.loads(run.config_json or "{}").get("resources_url")
    return url if trusted and isinstance(url, str) and url else None


def _version_of(con, server: ResourcesServer) -> str:
    """The version verdicts are stored under: the parameters' version, or, when the store
    records other code for it (the verifier changed since), that version with this code's hash."""
    version = server.verifier_version
    code = code_hash(server.verifier)
    row = verifier_versions.version_with_code(con, version)
    if code is not None and row is not None and row[2] is not None and row[2] != code:
        return with_code(version, code)
    return version


def _to_judge(con, text_only: bool, source: str, params: list) -> Iterator[list[tuple]]:
    """Batches of (task_id, output_text, trajectory_json, rollout ids) to judge, from the
    rollouts `r` that `source` (FROM ... WHERE) selects. A text-only verifier's come grouped by
    task and text, without the trajectory: one verdict for every rollout that gave the answer
    (100 repeats of an arithmetic task give a few distinct answers), and no trajectory read or
    parsed (once half of a reverify's work)."""
    if text_only:
        sql = (
            f"SELECT r.task_id, r.output_text, NULL, list(r.rollout_id) {source} "
            "GROUP BY r.task_id, r.output_text"
        )
    else:
        sql = f"SELECT r.task_id, r.output_text, r.trajectory_json, [r.rollout_id] {source}"
    cursor = con.execute(sql, params)
    while rows := cursor.fetchmany(BATCH):
        yield rows


def verify_all(
    server: ResourcesServer, tasks: dict[str, Task], rows: list[tuple], store: Path
) -> list[Verification]:
    """Verdicts of (task_id, output_text, trajectory_json, rollout ids) rows (orjson: parsing
    trajectories was half of a reverify's work)."""
    return server.verify_many(
        VerifyInput(
            tasks[task_id],
            output_text or "",
            _stored_json(
                trajectory, list, store, f"rollout {ids[0]}", "trajectory_json", orjson.loads
            ),
        )
        for task_id, output_text, trajectory, ids in rows
    )


def _judge(
    con,
    store: Path,
    server: ResourcesServer,
    tasks: dict[str, Task],
    version: str,
    now: datetime,
    source: str,
    params: list,
) -> int:
    """Judge the rollouts `source` selects and insert their verdicts as `version`, batch by
    batch, staged through Arrow (`stage_verdicts`; the caller stores them, sealed, with
    `insert_staged`), each verdict staged once for each of its rollouts; a second connection
    streams the rollouts while `con` writes, so memory stays one batch.
    A verdict is copied only when stored under another version (the verifier's code changed
    since): copying every one was a tenth of a reverify. Returns the rollouts judged."""
    reader = con.cursor()
    judged = 0
    try:
        for rows in _to_judge(reader, server.text_only, source, params):
            verdicts = verify_all(server, tasks, rows, store)
            stored = [
                verification_row(
                    row[3],
                    verdict
                    if verdict.verifier_version == version
                    else replace(verdict, verifier_version=version),
                    now,
                )
                for row, verdict in zip(rows, verdicts, strict=True)
            ]
            stage_verdicts(con, stored)
            judged += sum(len(row[3]) for row in rows)
    finally:
        reader.close()
    return judged


def _write(
    con, store: Path, server: ResourcesServer, version: str, base: _Base, tasks, failed_only: bool
) -> int:
    """Judge and insert, as `version`, in one transaction: a crash leaves the store as it was."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with transaction(con):
        register_verifier_version(
            con,
            version,
            server.verifier.name,
            server.params.model_dump(mode="json"),
            source=f"{REVERIFY_SOURCE}{base.version or 'no stored version'}",
            code_hash=code_hash(server.verifier),
        )
        judged = _judge(
            con,
            store,
            server,
            tasks,
            version,
            now,
            new_version_source(failed_only),
            [base.version],
        )
        if failed_only and base.stored:
            # The base version's passing verdicts, copied row for row into the new version.
            carry_passing(con, STAGED_VERDICTS, version, base.version, now, failed_only=failed_only)
        insert_staged(con)
        # the new version's row, its parameters and code hash decide its numbers: sealed
        seal_tasks(con, claim(con, str(store)))
    return judged


def _rejudge(
    con,
    store: Path,
    server: ResourcesServer,
    version: str,
    tasks: dict[str, Task],
    failed_only: bool,
) -> int:
    """Under a version already stored: judge again the rollouts whose verification errored (a
    crash, a timeout, a judge that failed; the old verdicts are set aside as evidence) or is
    missing (a reverify killed half-way), and unless `failed_only` those a `--failed-only`
    reverify carried from its base version: a pass under other parameters is no verdict of
    these. One transaction for the new verdicts."""
    supersede_verifications(con, version, carried=not failed_only)
    with transaction(con):
        judged = _judge(
            con,
            store,
            server,
            tasks,
            version,
            datetime.now(UTC).replace(tzinfo=None),
            REJUDGE_SOURCE,
            [version],
        )
        insert_staged(con)
        return judged


class FlippedRollouts(Result):
    """Rollouts whose verdict changed; the lists are capped, `count` is not."""

    to_pass: list[str]
    to_fail: list[str]
    count: int


class FlippedTask(Result):
    """A task whose number of passing rollouts changed."""

    task_id: str
    passed_before: int
    passed_after: int


class Flips(Result):
    rollouts: FlippedRollouts
    tasks: list[FlippedTask]


class Reverified(Result):
    """What `reverify` stored and what changed (`gym eval reverify --json` prints it)."""

    environment: str
    verifier: str
    params: dict[str, Any]
    base_version: str | None
    new_version: str
    #: "rejudged": the version was stored; its errored or missing verdicts were judged again
    status: Literal["written", "rejudged", "already stored"]
    #: rollouts judged
    reverified: int
    failed_only: bool
    flips: Flips
    #: None when the base version was not stored
    before: Headline | None
    after: Headline
    #: the version profile, diagnose, reports, history and data read from now on: the new one
    #: only when asked (`make_current`), else the one read before
    current_version: str
    made_current: bool


def flips(con, old: str, new: str, *, limit: int | None = None) -> Flips:
    """Rollouts and tasks whose outcome differs between two verifier versions.

    A rollout passes under a version when its verification there is ok and passed; an error
    or a missing verification counts as not passing."""
    to_pass, to_fail, count = flipped_rollouts(con, old, new, limit=limit)
    tasks = flipped_tasks(con, old, new)
    return Flips(
        rollouts=FlippedRollouts(to_pass=to_pass, to_fail=to_fail, count=count),
        tasks=[
            FlippedTask(task_id=task_id, passed_before=before, passed_after=after)
            for task_id, before, after in tasks
        ],
    )


def reverify(
    run_dir: Path | str,
    settings: dict[str, Any],
    *,
    failed_only: bool = False,
    force: bool = False,
    base_version: str | None = None,
    max_listed: int | None = 1000,
    make_current: bool = False,
) -> Reverified:
    """Store a new verifier version for the run in `run_dir` and report what changed. With no
    `settings`, the verifier is the environment's as it is now (its manifest's parameters). A
    version whose stored code hash differs from the verifier's code now is stored anew, as
    `version+codehash` (`gymflow.verifiers.identity`).

    The new version is what the run is read under from now on only with `make_current`; else
    the version read before stays current (a what-if never silently becomes the run's numbers).

    Raises ReverifyError (nothing written) when the
    environment is unknown, verifies live session state (unless `force`), or rejects the
    parameters; SealsBroken (exit 2, nothing written) when a stored verdict's seal does not
    match or a verdict was deleted (`sealed_first.py`)."""
    con = connect(run_dir)
    try:
        # verdicts judged against edited rollouts (their verdicts deleted or forged), an edited
        # answer key or version row would be sealed: refused (store/sealed_first.py); under the
        # analyses' cap, as health's same check: each verdict is read with its rollout, and
        # under DuckDB's default limit (80% of the machine) that join grew with the store
        was_checked = memory_capped_call(check_before_writing)(con, str(store_path(run_dir)))
        run = run_info(con)
        if not run.environment:  # an import that was not matched to an environment
            raise ReverifyError(
                f"run {run.run_id} names no environment (imported without --environment?): "
                "reverify runs an environment's verifier; import it again with "
                "`gym import nemo-gym FILE --environment NAME --out DIR`"
            )
        try:
            env = load_environment(run.environment)
        except RegistryError as exc:
            raise ReverifyError(
                f"run {run.run_id}: reverify needs the environment's verifier, but {exc}"
            ) from None
        spec = env.manifest.verifier
        base = _base_version(con, store_path(run_dir), spec.name, spec.params, base_version)
        # No settings: the environment's verifier as it is now (its manifest's parameters).
        params = {**base.params, **settings} if settings else dict(spec.params)
        if servers := store_named_servers(params, settings):
            act = (
                f"verifier version {base.version}'s stored parameters name {', '.join(servers)}, "
                "which a reverify calls with the keys they name"
            )
            own_or_refused(con, store_path(run_dir), act, "--set the server yourself")
        try:
            server = env.resources_server(params)
        except UserError as exc:  # parameters that do not validate, a verifier gone
            raise ReverifyError(f"--set: {exc}" if settings else str(exc)) from None
        try:
            result = _reverify_with(
                con,
                store_path(run_dir),
                run,
                env,
                spec,
                base,
                server,
                force=force,
                failed_only=failed_only,
                max_listed=max_listed,
                make_current=make_current,
                trusted=was_checked,
            )
        finally:
            server.close()
    finally:
        con.close()
    return result


@memory_capped_call
def _reverify_with(
    con,
    store: Path,
    run: RunInfo,
    env: Environment,
    spec: VerifierRef,
    base: _Base,
    server: ResourcesServer,
    *,
    force: bool,
    failed_only: bool,
    max_listed: int | None,
    make_current: bool,
    trusted: bool,
) -> Reverified:
    """reverify's work once its resources server is built (the caller closes it), under the
    analyses' memory cap: what it writes is one transaction, which running out of memory rolls
    back before it runs again uncapped (10M rollouts: 3.9 GiB capped, 4.2 GiB not). `trusted`:
    the writer's check found every seal this machine's and matching."""
    refusal = server.reverify_refusal(run_server(run, trusted=trusted))
    if refusal is not None and not force:
        raise ReverifyError(f"{refusal}; pass --force to verify without it")
    new_version = _version_of(con, server)
    stored = set(verifier_versions.stored_versions(con))
    # from the benchmark, never the store's copy where the verifier runs it (task_source.py)
    tasks = trusted_tasks(con, store, run, env, task_code=server.verifier.task_code)
    if new_version not in stored:
        reverified = _write(con, store, server, new_version, base, tasks, failed_only)
        status = "written"
    else:
        reverified = _rejudge(
            con,
            store,
            server,
            new_version,
            tasks,
            failed_only,
        )
        status = "rejudged" if reverified else "already stored"
    if make_current:
        verifier_versions.make_current(con, new_version)
    old = base.version if base.stored else new_version
    return Reverified(
        environment=env.name,
        verifier=spec.name,
        params=server.params.model_dump(mode="json"),
        base_version=base.version or None,
        new_version=new_version,
        status=status,
        reverified=reverified,
        failed_only=failed_only,
        flips=flips(con, old, new_version, limit=max_listed),
        before=headline(con, old) if base.stored else None,
        after=headline(con, new_version),
        current_version=verifier_versions.current_verifier_version(con),
        made_current=make_current,
    )
