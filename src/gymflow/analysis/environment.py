"""What the analysis needs to know about a run's environment and verifier: the reward range and
pass threshold, which verdict reasons mean "no answer in the expected form", and the
parameters of the verifier's lenient reading.

A store records the environment's name, not its manifest; the manifest comes from the registry.
A run imported from elsewhere may name no environment gymflow knows, and then these are unknown
(the checks that need them say they were skipped rather than guessing)."""

from __future__ import annotations

from dataclasses import dataclass

from gymflow.environments.registry import RegistryError, load_environment
from gymflow.store.runs import run_info
from gymflow.store.verifier_versions import verifier_name
from gymflow.verifiers.base import get_verifier


@dataclass(frozen=True, slots=True)
class RewardSpec:
    low: float
    high: float
    pass_threshold: float


def reward_spec(con) -> RewardSpec | None:
    """The reward range and pass threshold of the store's environment, or None if unknown."""
    name = run_info(con).environment
    if not name:
        return None
    try:
        manifest = load_environment(name).manifest
    except RegistryError:
        return None
    low, high = manifest.reward_range
    return RewardSpec(float(low), float(high), float(manifest.pass_threshold))


def _verifier_spec(con, verifier_version: str):
    """The VerifierSpec behind `verifier_version`, or None when it is unknown here."""
    name = verifier_name(con, verifier_version) or verifier_version.partition("@")[0]
    try:
        return get_verifier(name)
    except RegistryError:
        pass
    environment = run_info(con).environment
    try:  # an environment's own verifier registers when its environment loads
        if environment:
            load_environment(environment)
        return get_verifier(name)
    except RegistryError:
        return None


def lenient_params(con, verifier_version: str) -> dict | None:
    """The parameters of the lenient reading the verifier behind `verifier_version` declares
    (`VerifierSpec.lenient`), over those the version was made with; None when it declares none
    or is unknown here."""
    spec = _verifier_spec(con, verifier_version)
    if spec is None or spec.lenient is None:
        return None
    return dict(spec.lenient)


def no_answer_reasons(con, verifier_version: str) -> tuple[str, ...]:
    """The verdict reasons the verifier behind `verifier_version` declares as "no answer in the
    expected form" (`VerifierSpec.no_answer_reasons`, next to the reasons themselves); () when
    that verifier is unknown here (a run imported from another tool)."""
    spec = _verifier_spec(con, verifier_version)
    return tuple(sorted(spec.no_answer_reasons)) if spec is not None else ()
