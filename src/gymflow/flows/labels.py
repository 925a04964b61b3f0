"""What makes an evaluation flow run findable in the Prefect UI: a name from its benchmark, model
and date, and tags to filter by benchmark, environment, model and harness."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any

from prefect.client.orchestration import get_client
from prefect.runtime import flow_run

from gymflow.config import EvalConfig
from gymflow.rollouts.plan import RunPlan


def _field(config: Any, *path: str) -> Any:
    """A field of the config parameter, validated (EvalConfig) or still as submitted (a dict)."""
    for name in path:
        config = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    return config


#: The names Prefect makes up for a run nobody named: its server's two words (coolname's
#: adjective-animal, `prefect.utilities.names.generate_slug(2)`), and its UI's form, which
#: pre-fills a star's name (a Greek letter, maybe numbered, then words: alpha3-centauri-void).
GENERATED_NAME = re.compile(
    r"[a-z]+-[a-z]+|(alpha|beta|gamma|delta|epsilon|zeta|eta|theta|iota|kappa|lambda|mu|nu|xi|"
    r"omicron|pi|rho|sigma|tau|upsilon|phi|chi|psi|omega)\d*(-[a-z]+)+"
)


def run_name() -> str:
    """`flow_run_name` of the evaluation flows, e.g. arithmetic-smoke_my-model_2026-11-30T0200Z;
    a name given to the run (typed in the UI's Run Name, `--name`) is kept."""
    given = flow_run.name
    if given and not GENERATED_NAME.fullmatch(given):
        return given
    config = flow_run.parameters.get("config")
    target = _field(config, "benchmark") or _field(config, "environment") or "eval"
    model = _field(config, "model", "name") or "gymflow-local-policy"
    when = flow_run.scheduled_start_time or datetime.now(UTC)
    name = f"{target}_{model}_{when.astimezone(UTC):%Y-%m-%dT%H%MZ}"
    out = _field(config, "out")
    if flow_run.parent_flow_run_id and out:
        # a subflow (a study's arm) apart from its siblings and parent: its run folder's name
        name += f"_{PurePath(out).name}"
    return name


def shard_run_name(run_id: str, config: EvalConfig) -> str:
    """A shard's flow run, apart from its parent's: `<run id>-shard-I-of-N`."""
    return f"{run_id}-shard-{config.shard.index}-of-{config.shard.count}"


def eval_shard_name() -> str:
    """`flow_run_name` of the eval-shard flow: a given name (a work-pool shard is named by the
    run that starts it), else the shard's own (`shard_run_name`)."""
    given = flow_run.name
    if given and not GENERATED_NAME.fullmatch(given):
        return given
    return eval_shard_name_of(flow_run.parameters.get("config"))


def eval_shard_name_of(config: EvalConfig | dict[str, Any]) -> str:
    """The name an eval-shard flow run of `config` gives itself (`shard_run_name`)."""
    if not isinstance(config, EvalConfig):
        config = EvalConfig.model_validate(config)
    return shard_run_name(config.fingerprint(), config)


def run_tags(plan: RunPlan) -> list[str]:
    """benchmark:, environment:, model: and harness: tags (the environment's harness if unset)."""
    benchmark = [f"benchmark:{plan.benchmark.name}"] if plan.benchmark else []
    return [
        f"model:{plan.config.model.name}",
        *benchmark,
        f"environment:{plan.env.name}",
        f"harness:{plan.harness}",
    ]


def tag_run(plan: RunPlan) -> None:
    """Give this flow run the run's tags it lacks, beside those its deployment gave it. A run
    started by `gym eval run` was created with them (`prefect.tags` around the call), and one
    from the UI or a schedule gets them in one update: the flow run's tags are read from its
    context, not from the API."""
    if flow_run.id is None:
        return
    current = list(flow_run.tags)
    missing = [tag for tag in run_tags(plan) if tag not in current]
    if missing:
        with get_client(sync_client=True) as client:
            client.update_flow_run(flow_run.id, tags=[*current, *missing])
