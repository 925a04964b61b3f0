"""`gym eval decide RUN --confirm`: the decision's one-factor experiment run as a small paired
study on the tasks it is about, and whether the effect its hypothesis predicts happened.

- a reverify (verifier repair): the run's store is copied beside it and its rollouts judged
  again under the verifier's lenient reading; no model call;
- a rerun (a raised output-token limit, `tool_choice: auto`, the prompt asking for the form the
  verifier reads, more repeats at a temperature above zero): the run's own config with the one
  factor changed, collected on the affected tasks only, into a run folder of its own.

Each lands under RUN/confirm/FACTOR, so it can be read, reported or compared like any run. The
study is paired on the tasks: each task's measure before (as stored, under the version the
run is read under) and after the change. The measure is the one the prediction is about: the
pass rate (the effect happened when more tasks pass after than before; for model training,
when still none passes, where skill improvement predicts some would), or, for rollouts an
external agent lost, the share that ends judged (they finish under gymflow's own agent,
whatever their verdict)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from gymflow.analysis.results import Confirmation, Experiment
from gymflow.analysis.seals import own_or_refused
from gymflow.core.credentials import named_servers
from gymflow.core.errors import UserError
from gymflow.core.written import own_folder
from gymflow.store.db import connect, copy_store, store_path
from gymflow.store.queries.scores import task_judged_shares, task_pass_rates
from gymflow.store.runs import config_json
from gymflow.store.sealed_files import read_sealed, write_sealed
from gymflow.store.verifier_versions import current_verifier_version

#: tasks a confirming experiment reruns at most: a small study, not a second run
MAX_TASKS = 24
#: where the outcome is kept beside the run, for the report to show
OUTCOME = Path("confirm") / "outcome.json"


class ConfirmError(UserError):
    """The experiment cannot run on this run (no stored config, an unknown benchmark)."""


#: the experiment's measure -> the query giving it per task
MEASURES = {"pass_rate": task_pass_rates, "judged_share": task_judged_shares}


def _rates(con, version: str, tasks: list[str], experiment: Experiment) -> dict[str, float]:
    """task -> the experiment's measure under `version`: the share of its scored rollouts that
    passed, or of its rollouts that ended judged."""
    query = MEASURES[experiment.measure]
    return {task: float(rate) for task, rate in query(con, version, tasks)}


def _slug(experiment: Experiment) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", experiment.factor.lower()).strip("-") or "experiment"


def _merged(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _trusted_to_name_servers(con, store: Path, experiment: Experiment) -> None:
    """A rerun calls the servers its stored config names, with the keys it names: refused,
    before anything is written, unless this machine sealed the store and every seal matches."""
    stored = config_json(con)
    servers = named_servers(_merged(json.loads(stored), experiment.change)) if stored else []
    if servers:
        act = f"--confirm's rerun calls {', '.join(sorted(set(servers)))} with the keys it names"
        own_or_refused(con, store, act, "run it with `gym eval run` and a config of your own")


def _reverify(store: Path, folder: Path, experiment: Experiment) -> tuple[Path, str]:
    """The store copied to `folder` and judged again under the experiment's verifier
    parameters; (the copy's run folder, the new version)."""
    from gymflow.reverify.new_version import reverify

    folder.mkdir(parents=True)
    # gymflow's own copy (`copy_store`): its generation starts above the one recorded in
    # `folder`, so the copy made again over an earlier confirmation that took its copy
    # further opens
    copy_store(store, folder)
    result = reverify(folder, experiment.change.get("verifier_params", {}), max_listed=0)
    return folder, result.new_version


def _rerun(store: Path, folder: Path, experiment: Experiment, tasks: list[str]) -> tuple[Path, str]:
    """The run's config with the one factor changed, collected on `tasks` into `folder`;
    (the run folder, its verifier version)."""
    from pydantic import ValidationError

    from gymflow.core.config import EvalConfig, format_validation_error
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import model_endpoint

    con = connect(store, read_only=True)
    try:
        stored = config_json(con)
    finally:
        con.close()
    if not stored:
        raise ConfirmError(f"{store}: the run holds no config to rerun (an imported run?)")
    stored_config = json.loads(stored)
    changed_kind = experiment.change.get("model", {}).get("kind")
    if changed_kind and stored_config.get("model", {}).get("kind", "local") == "local":
        raise ConfirmError(
            f"{store}: the experiment changes model.kind to {changed_kind!r}, and the run's model "
            "is the simulated policy, which has no server of that kind"
        )
    config = _merged(stored_config, experiment.change)
    config["out"] = str(folder)
    config.pop("shard", None)
    try:
        validated = EvalConfig.model_validate(config)
    except ValidationError as exc:
        raise ConfirmError(format_validation_error(exc, f"{store}: runs.config_json")) from None
    plan = resolve(validated)
    wanted = set(tasks)
    keys = [key for key in plan.keys() if key[0] in wanted]  # noqa: SIM118 (a list)
    if not keys:
        raise ConfirmError(f"{store}: none of the experiment's tasks is in the rerun's plan")
    con = connect(plan.run_dir, create=True)
    try:
        register_run(con, plan, resume=False)
        with model_endpoint(plan) as base_url:
            run_collect(plan, keys, con, base_url=base_url)
    finally:
        con.close()
    return plan.run_dir, plan.verifier_version


def confirm(run_dir: Path | str, experiment: Experiment | None) -> Confirmation | None:
    """Run `experiment` (the decision's) on its tasks, at most MAX_TASKS of them, and judge
    whether its predicted effect happened; None when there is no experiment."""
    if experiment is None:
        return None
    store = store_path(run_dir)
    tasks = sorted(experiment.tasks)[:MAX_TASKS]
    con = connect(store, read_only=True)
    try:
        if experiment.kind == "rerun" and tasks:
            _trusted_to_name_servers(con, store, experiment)
        before = _rates(con, current_verifier_version(con), tasks, experiment)
    finally:
        con.close()
    if experiment.kind == "none" or not tasks:
        return Confirmation(
            experiment=experiment, ran=False, run_dir=None, tasks=len(tasks), before=_mean(before),
            after=None, gained=0, lost=0, effect=False,
            why=f"gymflow cannot run this experiment itself: {experiment.how}",
        )  # fmt: skip
    folder = own_folder(store.parent, OUTCOME.parent.name, _slug(experiment))
    if folder.exists():
        shutil.rmtree(folder)  # an earlier confirmation of the same factor: ours to replace
    if experiment.kind == "reverify":
        out, version = _reverify(store, folder, experiment)
    else:
        out, version = _rerun(store, folder, experiment, tasks)
    con = connect(out, read_only=True)
    try:
        after = _rates(con, version, tasks, experiment)
    finally:
        con.close()
    confirmation = judged(experiment, before, after, str(out))
    save_outcome(store.parent, confirmation)
    return confirmation


def save_outcome(run_folder: Path, confirmation: Confirmation) -> Path:
    """Keep `confirmation` beside the run (RUN/confirm/outcome.json) for its report."""
    path = own_folder(run_folder, OUTCOME.parent.name) / OUTCOME.name
    return write_sealed(path, confirmation.as_json(), run_dir=run_folder)


def load_outcome(run_folder: Path, decision) -> Confirmation | None:
    """The outcome kept beside the run, when it is of the experiment `decision` names now (an
    outcome of an earlier decision's experiment is not this one's) and sealed here for this
    run (`store/sealed_files.py`); None otherwise."""
    content = (
        read_sealed(run_folder / OUTCOME, run_dir=run_folder)
        if decision.experiment is not None
        else None
    )
    if content is None:
        return None
    try:
        kept = Confirmation.model_validate(content)
    except ValueError:
        return None
    return kept if kept.experiment == decision.experiment else None


def _mean(rates: dict[str, float]) -> float | None:
    return sum(rates.values()) / len(rates) if rates else None


def judged(
    experiment: Experiment, before: dict[str, float], after: dict[str, float], run_dir: str | None
) -> Confirmation:
    """Whether the predicted effect happened, paired on the tasks both sides scored."""
    paired = sorted(set(before) & set(after))
    if experiment.measure == "judged_share":
        gained = sum(after[t] > before[t] for t in paired)
        lost = sum(after[t] < before[t] for t in paired)
    else:
        gained = sum(after[t] > 0 and before[t] == 0 for t in paired)
        lost = sum(before[t] > 0 and after[t] == 0 for t in paired)
    mean_before = _mean({t: before[t] for t in paired})
    mean_after = _mean({t: after[t] for t in paired})
    if not paired:
        return Confirmation(
            experiment=experiment, ran=True, run_dir=run_dir, tasks=0, before=None, after=None,
            gained=0, lost=0, effect=False,
            why="no task was scored both before and after the change (the rerun's rollouts "
            f"failed: see `gym eval health {run_dir}`), so the experiment shows nothing",
        )  # fmt: skip
    if experiment.action == "model_training":
        effect = bool(paired) and all(after[t] == 0 for t in paired)
        why = (
            f"on {len(paired)} task(s) none passed again at more repeats: a capability gap"
            if effect
            else f"{sum(after[t] > 0 for t in paired)} of {len(paired)} task(s) passed on some "
            "repeat: the policy can do them, not reliably (skill improvement)"
        )
    else:
        effect = bool(paired) and (mean_after or 0) > (mean_before or 0) and gained > lost
        measure = experiment.measure.replace("_", " ")
        change = f"{measure} {_pct(mean_before)} -> {_pct(mean_after)} on {len(paired)} task(s)"
        why = (
            f"the predicted effect happened: {change}, {gained} task(s) gained, {lost} lost"
            if effect
            else f"the predicted effect did not happen: {change}, {gained} gained, {lost} lost"
        )
    return Confirmation(
        experiment=experiment, ran=True, run_dir=run_dir, tasks=len(paired), before=mean_before,
        after=mean_after, gained=gained, lost=lost, effect=effect, why=why,
    )  # fmt: skip


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
