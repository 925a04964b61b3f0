"""A study file: a baseline eval config and its variants, each naming what it changes.

```yaml
name: checkpoint-and-harness
out: runs/study                 # each run's folder is made under it
baseline: {benchmark: arithmetic-smoke, repeats: 4}
variants:
  - name: step-2000
    set: {model: {name: ckpt-2000}}
  - name: loose
    set: {verifier_params: {tolerance: 0.5}}   # only the verifier: a reverify, no inference
  - name: new-model-and-prompt
    set: {model: {name: other}, prompt_template: "..."}
    confounded: true            # allowed, and labelled as not attributable to either
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gymflow.analysis.factors import changed_factors, groups_of
from gymflow.core.config import (
    ConfigError,
    EvalConfig,
    format_validation_error,
    load_config_file,
    merge_overrides,
    parse_config,
)
from gymflow.environments.registry import with_benchmark_sampling
from gymflow.rollouts.plan import resolve

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class VariantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Folder-safe name: lowercase letters, digits, . _ -")
    set: dict[str, Any] = Field(description="Config keys this variant changes, as nested YAML.")
    confounded: bool = Field(
        False, description="Allow more than one factor; its difference is then not attributable."
    )

    @field_validator("name")
    @classmethod
    def _folder_safe(cls, value: str) -> str:
        if not _NAME.match(value) or value == "baseline":
            raise ValueError("use lowercase letters, digits, '.', '_' or '-' (not 'baseline')")
        return value


class StudySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    out: str = Field("runs/study", description="Folder under which each run's folder is made.")
    baseline: dict[str, Any]
    variants: list[VariantSpec] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Arm:
    """One run of the study: the baseline or a variant, with its resolved config."""

    name: str
    config: EvalConfig
    factors: tuple[str, ...]
    #: the config keys it changes (`gymflow.analysis.factors`), e.g. model.kind, model.base_url
    keys: tuple[str, ...]
    confounded: bool
    #: only verifier parameters change: judged again on the baseline's rollouts, no inference
    reverify_only: bool

    @property
    def isolates(self) -> str | None:
        """The one factor this variant isolates, or None when it changes several (or none)."""
        return self.factors[0] if len(self.factors) == 1 else None


@dataclass(frozen=True, slots=True)
class Study:
    name: str
    out: Path
    baseline: Arm
    variants: tuple[Arm, ...]


def _arm_config(base: dict[str, Any], changes: dict[str, Any], out: Path, source: str):
    merged = with_benchmark_sampling(merge_overrides(base, _flatten(changes))) | {"out": str(out)}
    return parse_config(merged, source)


def _flatten(changes: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"name": x}} -> {"model.name": x}: a variant changes only the keys it names, and
    keeps the baseline's others (a dict value replaces only where it is not itself a mapping)."""
    flat: dict[str, Any] = {}
    for key, value in changes.items():
        if isinstance(value, dict) and value:
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def resolve_study(spec: StudySpec, source: str) -> Study:
    """Every arm's config, checked; raises ConfigError naming the variant and what is wrong."""
    out = Path(spec.out)
    baseline_config = _arm_config(spec.baseline, {}, out / "baseline", f"{source}: baseline")
    baseline = Arm("baseline", baseline_config, (), (), False, False)
    arms, problems = [], []
    for variant in spec.variants:
        where = f"{source}: variant {variant.name!r}"
        try:
            config = _arm_config(spec.baseline, variant.set, out / variant.name, where)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        changed = changed_factors(baseline_config, config)
        factors, keys = groups_of(changed), tuple(f.key for f in changed)
        if not factors:
            problems.append(f"{where}: changes no factor (same config as the baseline)")
        elif len(factors) > 1 and not variant.confounded:
            problems.append(
                f"{where}: changes {len(factors)} factors ({', '.join(factors)}: "
                f"{', '.join(keys)}); a difference "
                "could not be attributed to any one of them. Split it into one variant per "
                "factor, or set `confounded: true` to run it labelled as not attributable"
            )
        reverify_only = factors == ("verifier parameters",)
        if reverify_only:
            # judged only after the baseline's inference: a parameter the verifier refuses
            # must stop the study before that is paid for, not after
            try:
                resolve(config)
            except ConfigError as exc:
                problems.append(f"{where}: {exc}")
        arms.append(Arm(variant.name, config, factors, keys, variant.confounded, reverify_only))
    names = [v.name for v in spec.variants]
    if len(set(names)) != len(names):
        problems.append(f"{source}: variant names repeat ({', '.join(names)})")
    if problems:
        raise ConfigError("\n".join(problems))
    return Study(spec.name, out, baseline, tuple(arms))


def read_spec(path: Path) -> StudySpec:
    data = load_config_file(path)
    try:
        return StudySpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from None


def store_of(study: Study) -> dict[str, Path]:
    """The run folder holding each arm's verdicts. A verifier-only variant judges a copy of the
    baseline's store again (no inference; the baseline's own store keeps its verifier as its
    newest, so later reads of it are not silently the variant's); an arm whose config coincides
    with an earlier one's (same fingerprint) shares its rollouts instead of paying twice."""
    stores: dict[str, Path] = {study.baseline.name: Path(study.baseline.config.out)}
    by_fingerprint = {study.baseline.config.fingerprint(): stores[study.baseline.name]}
    for arm in study.variants:
        if arm.reverify_only:
            stores[arm.name] = Path(arm.config.out)
            continue
        stores[arm.name] = by_fingerprint.setdefault(arm.config.fingerprint(), Path(arm.config.out))
    return stores
