"""What makes an evaluation flow run findable in the Prefect UI: a name from its benchmark, model
and date, and tags to filter by benchmark, environment, model and harness."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import cache
from itertools import product
from pathlib import Path, PurePath
from typing import Any

import coolname
import prefect
from coolname.loader import load_config
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run

from gymflow.core.config import EvalConfig
from gymflow.rollouts.plan import RunPlan


def _field(config: Any, *path: str) -> Any:
    """A field of the config parameter, validated (EvalConfig) or still as submitted (a dict)."""
    for name in path:
        config = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    return config


def _words(config: dict[str, Any], name: str) -> list[tuple[frozenset[str], ...]]:
    """What a coolname list `name` generates, as alternatives of word sets, one per word."""
    entry = config[name]
    if entry["type"] == "words":
        return [(frozenset(entry["words"]),)]
    if entry["type"] == "nested":
        return [shape for child in entry["lists"] for shape in _words(config, child)]
    if entry["type"] == "cartesian":
        return [
            tuple(word for part in parts for word in part)
            for parts in product(*(_words(config, child) for child in entry["lists"]))
        ]
    return []  # phrases and constants: not in the two-word slugs Prefect asks for


@cache
def _server_names() -> list[tuple[frozenset[str], ...]]:
    """The names Prefect's server gives a flow run created without one: coolname's two-word
    slugs (`prefect.utilities.names.generate_slug(2)`), read from coolname's own word lists."""
    return _words(load_config(Path(coolname.__file__).parent / "data"), "2")


#: The lists of the star names the UI's Run Name field pre-fills (`FlowRunNameInput`: a Greek
#: letter, maybe numbered; a constellation, star or place; maybe a word), told apart by a word
#: each holds.
_UI_LISTS = {"alphaRANDOM": 0, "centauri": 1, "nebula": 2}


@cache
def _ui_names() -> tuple[frozenset[str], ...] | None:
    """The UI's name lists, read from the bundle Prefect serves (None: not found there)."""
    found: dict[int, frozenset[str]] = {}
    for script in sorted((Path(prefect.__ui_static_path__) / "assets").glob("*.js")):
        for listed in re.findall(
            r"`([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]*){20,})`", script.read_text("utf-8")
        ):
            words = frozenset(listed.split("."))
            for marker, position in _UI_LISTS.items():
                if marker in words:
                    found[position] = words
        if len(found) == len(_UI_LISTS):
            greek = frozenset(re.sub(r"(\d+|RANDOM)$", "", w) for w in found[0])
            return (greek, found[1], found[2])
    return None


def prefect_named(name: str) -> bool:
    """Whether Prefect made `name` up: its server's default for a run created without a name,
    or the star name its UI's form pre-fills and the user left. Decided by whether Prefect's
    own generators can produce it, not by its shape: a typed `baseline-run` is the user's."""
    words = name.split("-")
    for shape in _server_names():
        if len(shape) == len(words) and all(w in s for w, s in zip(words, shape, strict=True)):
            return True
    ui = _ui_names()
    if ui is None or len(words) < 2:
        return False
    greek, place, word = ui
    letter = re.fullmatch(r"([a-z]+)\d*", words[0])
    if letter is None or letter.group(1) not in greek:
        return False
    rest = words[1:]
    return any(
        "-".join(rest[:cut]) in place and (cut == len(rest) or "-".join(rest[cut:]) in word)
        for cut in range(1, len(rest) + 1)
    )


def run_name() -> str:
    """`flow_run_name` of the evaluation flows, e.g. arithmetic-smoke_my-model_2026-11-30T0200Z;
    a name given to the run (typed in the UI's Run Name, `--name`) is kept."""
    given = flow_run.name
    if given and not prefect_named(given):
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
    if given and not prefect_named(given):
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
