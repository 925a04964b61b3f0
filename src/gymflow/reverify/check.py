"""Reverify's check (`gym eval reverify RUN --check`): judge every stored rollout again under
a stored version's own parameters and compare with the verdicts the store holds, writing
nothing; the seals are recomputed too (`store/seal.py`)."""

from __future__ import annotations

from pathlib import Path

from gymflow.analysis.results import Result
from gymflow.core.errors import UserError
from gymflow.core.records import Verification
from gymflow.environments.base import Environment
from gymflow.environments.registry import RegistryError, load_environment
from gymflow.environments.resources import ResourcesServer
from gymflow.reverify.new_version import (
    BATCH,
    ReverifyError,
    run_server,
    store_named_servers,
    stored_params,
    verify_all,
)
from gymflow.reverify.task_source import trusted_tasks
from gymflow.store import verifier_versions
from gymflow.store.db import connect, store_path
from gymflow.store.queries.verdicts import recheck_rows
from gymflow.store.runs import run_info
from gymflow.store.seal import SealCheck, SealState, check_seals, older_state
from gymflow.verifiers.identity import code_hash


class Disagreement(Result):
    """A stored verdict the verifier, run again on the stored rollout, does not give."""

    rollout_id: str
    #: None when the store holds NULL there (an edited store is listed, not a traceback)
    task_id: str | None
    repeat_index: int | None
    stored: str
    recomputed: str


class Rechecked(Result):
    """What `gym eval reverify RUN --check` found (`--json` prints it). Nothing was written."""

    environment: str
    version: str
    #: verdicts stored under `version` and judged again
    checked: int
    agreed: int
    #: every stored verdict the verifier does not give again (the list is capped, `count` not)
    disagreements: list[Disagreement]
    count: int
    #: the verifier's code differs from the code the version was stored with: a disagreement
    #: may be the code's change rather than an edit of the store
    code_changed: bool
    #: the version's stored parameters are those its name hashes (`name@params-hash`): False is
    #: parameters edited in the store, under which any verdict could be judged again as stored
    #: (a tolerance of 1e300 passes every answer), so the check fails whatever the verdicts say
    params_named: bool
    #: which key sealed the store (`store/seal.py`): `sealed` (this machine's: checked),
    #: `foreign` (a key this machine does not hold: not checked), `unsealed` (written before
    #: the seal) or `stripped` (every verdict counted: seals removed from a store this machine
    #: sealed); and the verdicts, of any version, whose seal does not match (None: not
    #: checked), with the first of their rollout ids. A mismatch is an edit the judging cannot
    #: see: an output rewritten to the reference answer judges again as a pass.
    seal_state: SealState
    seal_mismatches: int | None
    seal_examples: list[str]
    #: the run's inputs (tasks, run row, verifier versions and parameters, the current
    #: version: `store/sealed_inputs.py`) are those its writers sealed; None: not checked
    #: (not this machine's key, or a store sealed before its inputs were)
    inputs_sealed: bool | None = None
    #: the rollouts' identities and outcomes (`store/sealed_rows.py`) are those sealed;
    #: None: not checked (not this machine's key, or a store sealed before they were)
    rollouts_sealed: bool | None = None
    #: the model calls (`store/sealed_rows.py`) are those sealed; None as `rollouts_sealed`
    calls_sealed: bool | None = None
    #: the verdict set (`store/sealed_rows.VERDICTS`) is the one sealed; None as `rollouts_sealed`
    verdicts_sealed: bool | None = None
    #: the store's task list is the one sealed (`store/seal.py`); None: not checked
    tasks_sealed: bool | None = None
    #: the store is an older sealed state of itself put back, or its generation record is not
    #: the one sealed (`store/generations.py`): one line naming the store (and both
    #: generations); None: neither, or not checked
    generation_failure: str | None = None
    #: False: nothing was judged (`unjudged_why`), because the parameters or the inputs read as
    #: edited, or name a server a store this machine did not seal may not name (a verifier
    #: built from them would call it: a judge's `base_url`, sent the owner's key from the
    #: `api_key_env` they name)
    judged: bool = True
    unjudged_why: str | None = None

    @property
    def agrees(self) -> bool:
        return (
            self.judged
            and self.count == 0
            and self.params_named
            and not self.seal_mismatches
            and self.inputs_sealed is not False
            and self.rollouts_sealed is not False
            and self.calls_sealed is not False
            and self.verdicts_sealed is not False
            and self.tasks_sealed is not False
            and self.generation_failure is None
        )


def _said(status: str | None, reward: float | None, passed: bool | None, kind: str | None) -> str:
    if status != "ok":
        return f"{status or 'no verdict'} ({kind or 'no kind'})"
    return f"{'pass' if passed else 'fail'}, reward {reward!r}"


def _same(stored: tuple, again: Verification) -> bool:
    status, reward, passed, kind = stored
    if status != again.status:
        return False
    if status != "ok":
        return kind == again.failure_kind
    same_reward = (reward is None and again.reward is None) or (
        reward is not None and again.reward is not None and abs(reward - again.reward) <= 1e-9
    )
    return passed is again.passed and same_reward


def check(
    run_dir: Path | str, version: str | None = None, *, max_listed: int | None = 1000
) -> Rechecked:
    """Judge every rollout again under a stored version's own parameters (default: the version
    the run is read under) and compare with what the store says, writing nothing.

    This catches verdicts edited in the store, consistently or not (`passed` and `reward` set
    together read healthy: health can only check that they agree with each other). An edit of
    the rollouts themselves (an output rewritten to the reference answer judges again as a
    pass) is caught by the seals, recomputed here too (`store/seal.py`). A verifier of live
    session state cannot be run again from the store (the state is gone): ReverifyError,
    nothing checked."""
    store = store_path(run_dir)
    con = connect(run_dir, read_only=True)
    try:
        run = run_info(con)
        version = version or verifier_versions.current_verifier_version(con)
        row = verifier_versions.version_with_code(con, version)
        if row is None:
            raise ReverifyError(f"no verifier version {version!r} in this store")
        try:
            env = load_environment(run.environment or "")
        except RegistryError as exc:
            raise ReverifyError(f"run {run.run_id}: cannot re-check its verdicts: {exc}") from None
        if row[0] != env.manifest.verifier.name:
            raise ReverifyError(
                f"version {version} is verifier {row[0]!r}, not environment {env.name}'s "
                f"({env.manifest.verifier.name!r}): there is nothing here to judge it again with"
            )
        try:
            params = stored_params(row[1], store, version)
            server = env.resources_server(params)
        except UserError as exc:
            raise ReverifyError(f"version {version}: {exc}") from None
        try:
            seals = check_seals(con)
            trusted = seals.store.state == "sealed"
            refusal = server.reverify_refusal(run_server(run, trusted=trusted))
            if refusal is not None:
                raise ReverifyError(
                    f"cannot re-check version {version}: {refusal}; its verdicts cannot be "
                    "recomputed from the store"
                )
            tasks = trusted_tasks(con, store, run, env, task_code=server.verifier.task_code)
            named = _params_named(version, server)
            if not named or seals.store.inputs_sealed is False:
                return _unjudged(env, version, seals, named, store, EDITED)
            if (servers := store_named_servers(params, {})) and not trusted:
                why = (
                    f"its stored parameters name {', '.join(servers)}, which the verifier would "
                    "call with the keys they name, and only a store this machine sealed may "
                    "(judge it again with your own server: `gym eval reverify RUN --set "
                    "base_url=...`)"
                )
                return _unjudged(env, version, seals, named, store, why)
            return _check_with(con, store, env, server, tasks, version, row[2], max_listed, seals)
        finally:
            server.close()
    finally:
        con.close()


def _check_with(
    con,
    store: Path,
    env: Environment,
    server: ResourcesServer,
    tasks: dict,
    version: str,
    stored_code: str | None,
    max_listed: int | None,
    seals: SealCheck,
) -> Rechecked:
    # Every completed rollout, with or without a verdict under the version (a failing verdict
    # deleted leaves the scores counting only the passes), and every verdict of a rollout.
    cursor = recheck_rows(con, version)
    checked = agreed = count = 0
    listed: list[Disagreement] = []
    while rows := cursor.fetchmany(BATCH):
        judged = [row for row in rows if row[5] == "completed" and row[1] in tasks]
        verdicts = iter(
            verify_all(server, tasks, [(row[1], row[2], row[3], [row[0]]) for row in judged], store)
        )
        for row in rows:
            checked += 1
            stored = row[6:10]
            if row[5] == "completed" and row[1] in tasks:
                again = next(verdicts)
                if _same(stored, again):
                    agreed += 1
                    continue
                recomputed = _said(again.status, again.reward, again.passed, again.failure_kind)
            else:
                recomputed = f"nothing to judge (rollout {row[5]}, task {row[1]!r} stored)"
            count += 1
            if max_listed is None or len(listed) < max_listed:
                listed.append(
                    Disagreement(
                        rollout_id=row[0],
                        task_id=row[1],
                        repeat_index=row[4],
                        stored=_said(*stored),
                        recomputed=recomputed,
                    )
                )
    return Rechecked(
        environment=env.name,
        version=version,
        checked=checked,
        agreed=agreed,
        disagreements=listed,
        count=count,
        code_changed=None not in (stored_code, code := code_hash(server.verifier))
        and stored_code != code,
        params_named=True,
        seal_state=seals.store.state,
        seal_mismatches=seals.mismatched,
        seal_examples=seals.examples,
        inputs_sealed=seals.store.inputs_sealed,
        rollouts_sealed=seals.store.rollouts_sealed,
        calls_sealed=seals.store.calls_sealed,
        verdicts_sealed=seals.store.verdicts_sealed,
        tasks_sealed=seals.store.tasks_sealed,
        generation_failure=_generation_failure(seals, store),
    )


def _generation_failure(seals: SealCheck, store: Path) -> str | None:
    return f"{store}: {older_state(seals.store)}" if seals.store.older_state else None


def _params_named(version: str, server: ResourcesServer) -> bool:
    """The version's stored parameters are those its name hashes (`name@params-hash`, with
    `+code` when its code changed since)."""
    return version == server.verifier_version or version.startswith(f"{server.verifier_version}+")


#: Why nothing was judged when the parameters or the inputs read as edited.
EDITED = (
    "a verifier built from parameters or inputs edited in the store could reach whatever they name"
)


def _unjudged(
    env: Environment, version: str, seals: SealCheck, named: bool, store: Path, why: str
) -> Rechecked:
    return Rechecked(
        environment=env.name,
        version=version,
        checked=0,
        agreed=0,
        disagreements=[],
        count=0,
        code_changed=False,
        params_named=named,
        seal_state=seals.store.state,
        seal_mismatches=seals.mismatched,
        seal_examples=seals.examples,
        inputs_sealed=seals.store.inputs_sealed,
        rollouts_sealed=seals.store.rollouts_sealed,
        calls_sealed=seals.store.calls_sealed,
        verdicts_sealed=seals.store.verdicts_sealed,
        tasks_sealed=seals.store.tasks_sealed,
        generation_failure=_generation_failure(seals, store),
        judged=False,
        unjudged_why=why,
    )
