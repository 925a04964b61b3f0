"""What the analysis needs to know about a run's environment: its reward range and pass threshold.

A store records the environment's name, not its manifest; the manifest comes from the registry.
A run imported from elsewhere may name no environment gymflow knows, and then these are unknown
(the checks that need them say they were skipped rather than guessing)."""

from __future__ import annotations

from dataclasses import dataclass

from gymflow.environments.registry import RegistryError, load_environment
from gymflow.store.runs import run_info


@dataclass(frozen=True, slots=True)
class RewardSpec:
    low: float
    high: float
    pass_threshold: float


def reward_spec(con) -> RewardSpec | None:
    """The reward range and pass threshold of the store's environment, or None if unknown."""
    name = run_info(con)["environment"]
    if not name:
        return None
    try:
        manifest = load_environment(name).manifest
    except RegistryError:
        return None
    low, high = manifest.reward_range
    return RewardSpec(float(low), float(high), float(manifest.pass_threshold))
