"""The factors of a run: every config value that decides its rollouts or verdicts, derived from
the recorded config itself, so a config field added later is a factor the moment it exists.

A factor is named by its dotted config key (`model.kind`, `model.base_url`,
`model.tool_choice`, `sampling.temperature`, `harness.max_turns`), except the few a run
records resolved (the benchmark's harness, prompt template and sampling when the config left
them unset) and those outside the config (dataset, gymflow and verifier versions). Factors fall
into groups, the units a study varies one at a time (`model`, `harness`, `prompt template`,
`sampling`, `verifier parameters`, `dataset version`): a difference is attributable when the
factors that differ are all of one group. Keys in `config.NOT_FACTORS` (where a run is written,
how fast it runs) are no factor."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gymflow.analysis.results import Factor
from gymflow.core.config import NOT_FACTORS, EvalConfig
from gymflow.environments.registry import benchmark_sampling

if TYPE_CHECKING:  # the store (and duckdb) is imported by whoever read the runs
    from gymflow.store.runs import RunInfo

#: The group of each top-level config key; a key not listed is a group of its own, named by it.
GROUPS = {
    "model": "model",
    "harness": "harness",
    "prompt_template": "prompt template",
    "sampling": "sampling",
    "verifier_params": "verifier parameters",
    "benchmark": "dataset version",
    "environment": "dataset version",
    "limit": "dataset version",
    "repeats": "dataset version",
}

#: Keys named in words rather than by their config path (the names comparisons always used).
NAMES = {
    "model.name": "model",
    "harness.name": "harness",
    "prompt_template": "prompt template",
    "dataset_version": "dataset version",
    "gymflow_version": "gymflow version",
    "verifier_version": "verifier version",
}

#: Recorded outside the config, with their groups.
_RECORDED = {
    "dataset_version": "dataset version",
    "gymflow_version": "gymflow version",
}


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        return {prefix: node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _is_factor(key: str) -> bool:
    return not any(key == skip or key.startswith(f"{skip}.") for skip in NOT_FACTORS)


def group_of(key: str) -> str:
    if key in _RECORDED:
        return _RECORDED[key]
    if key == "verifier_version":
        return "verifier parameters"
    top = key.split(".")[0]
    return GROUPS.get(top, top)


def config_factors(config: dict[str, Any]) -> dict[str, Any]:
    """Dotted key -> value of every factor in a config's JSON dump."""
    return {key: value for key, value in _flat(config).items() if _is_factor(key)}


def _recorded_config(config_json: str | None) -> dict[str, Any]:
    """The recorded config with today's defaults filled in, so a run recorded before a field
    existed compares with one that leaves it at its default; a config that no longer parses
    (an imported run's provenance) is compared as recorded."""
    raw = json.loads(config_json or "{}") or {}
    try:
        return EvalConfig.model_validate(raw).model_dump(mode="json")
    except (ValidationError, TypeError, ValueError):
        return raw if isinstance(raw, dict) else {"config": raw}


def run_factors(run: RunInfo) -> dict[str, Any]:
    """Dotted key -> value of every factor of a stored run (a `runs` row): its recorded config,
    with what the run resolved in place of what the config left unset."""
    found = config_factors(_recorded_config(run.config_json))
    found["model.name"] = run.model
    found["harness.name"] = run.harness
    found["prompt_template"] = run.prompt_template
    found["repeats"] = run.repeats
    found["benchmark"] = run.benchmark
    found["environment"] = run.environment
    if run.sampling_json:
        found = {k: v for k, v in found.items() if not k.startswith("sampling")}
        found |= _flat(json.loads(run.sampling_json), "sampling")
    for key in _RECORDED:
        found[key] = getattr(run, key)
    return found


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[Factor]:
    return [
        Factor(factor=NAMES.get(key, key), key=key, group=group_of(key), a=a.get(key), b=b.get(key))
        for key in sorted(a.keys() | b.keys(), key=lambda k: (group_of(k), k))
        if a.get(key) != b.get(key)
    ]


def differing_factors(
    run_a: RunInfo, run_b: RunInfo, version_a: str, version_b: str
) -> list[Factor]:
    """Every recorded factor whose value differs between two stored runs, the verifier version
    each is read under among them."""
    a = run_factors(run_a) | {"verifier_version": version_a}
    b = run_factors(run_b) | {"verifier_version": version_b}
    if not (_configured(run_a) and _configured(run_b)):
        # An imported run records no gymflow config (its file holds none): compared on the
        # factors both record, not on every config key it cannot have ("not set").
        shared = a.keys() & b.keys()
        a, b = ({k: v for k, v in side.items() if k in shared} for side in (a, b))
    return _differing(a, b)


def _configured(run: RunInfo) -> bool:
    """Whether a stored run's recorded config is a gymflow config (an import's is not)."""
    try:
        EvalConfig.model_validate(json.loads(run.config_json or "{}") or {})
    except (ValidationError, TypeError, ValueError):
        return False
    return True


def _as_run(config: EvalConfig) -> dict[str, Any]:
    """A config's dump with the sampling its run records: the benchmark's where the config
    sets none, so an unset setting never differs from the same value set (a variant setting
    the benchmark's own temperature read `sampling.temperature: null vs 0.7`)."""
    dump = config.model_dump(mode="json")
    if config.sampling is None:
        dump["sampling"] = benchmark_sampling(config.benchmark).model_dump(mode="json")
    return dump


def changed_factors(config_a: EvalConfig, config_b: EvalConfig) -> list[Factor]:
    """Every factor in which two configs differ (a study's variant and its baseline)."""
    return _differing(config_factors(_as_run(config_a)), config_factors(_as_run(config_b)))


def groups_of(factors: list[Factor]) -> tuple[str, ...]:
    """The groups of `factors`, each once, in their order."""
    return tuple(dict.fromkeys(f.group for f in factors))


def attribution(factors: list[Factor]) -> str:
    if not factors:
        return (
            "no recorded factor differs between the runs: a difference is sampling noise or "
            "something gymflow does not record"
        )
    groups = groups_of(factors)
    names = ", ".join(f.factor for f in factors)
    if len(groups) == 1:
        which = "" if names == groups[0] else f" ({names})"
        return f"only the {groups[0]} differs{which}: the difference can be attributed to it"
    return (
        f"{len(groups)} factors differ ({', '.join(groups)}: {names}): the difference cannot "
        "be attributed to any one of them; vary one thing at a time"
    )
