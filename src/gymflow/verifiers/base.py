"""Verifier registry. A verifier declares its parameters, reward range and pass threshold where it
is defined; its version is its name plus a hash of the parameters it ran with."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from gymflow.core.tasks import Task
from gymflow.errors import RuntimeFailure, UserError


class VerifierParamsError(UserError, ValueError):
    """Verifier parameters (a manifest's, a benchmark's, `--param`) that do not validate. Still a
    ValueError: pydantic validators that check them report it as a field error."""


class UnknownVerifier(UserError, KeyError):
    """No verifier registered under the name (a KeyError, as a registry lookup is one)."""


class VerifierError(RuntimeFailure):
    """The verifier could not judge this output (as opposed to judging it wrong)."""

    def __init__(self, message: str, kind: str = "verifier_error") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class VerifyInput:
    """What a verifier sees: the task, the final answer text, the trajectory, and for stateful
    environments the session's final state."""

    task: Task
    output_text: str
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    final_state: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    reward: float
    details: dict[str, Any] = field(default_factory=dict)
    #: Why a judged answer failed when it is a kind to count apart, not just a wrong answer:
    #: `tampering` (the answer's code touched the harness).
    failure_kind: str | None = None


VerifyFn = Callable[[VerifyInput, Any], Verdict]

#: What a task data field must hold: `scalar` is text or a number; `list` and `mapping` are JSON.
FieldKind = Literal["number", "text", "scalar", "list", "mapping"]


@dataclass(frozen=True, slots=True)
class DataField:
    """A field of `Task.data` a verifier reads: a dataset maps a column to it, and
    `gym env validate` checks every row's value against `kind`."""

    kind: FieldKind
    required: bool = True


@dataclass(frozen=True, slots=True)
class VerifierSpec:
    name: str
    params_model: type[BaseModel]
    fn: VerifyFn
    reward_range: tuple[float, float]
    pass_threshold: float
    description: str
    #: Waits on a network service (an LLM judge) rather than computing: such a verifier runs on
    #: threads, many at once, bounded by its own network timeouts, not in the process pool.
    io_bound: bool = False
    #: Runs model-written code or parses untrusted input with no bound of its own: it always
    #: verifies in a killable worker process under a time bound (the environment's
    #: verify_timeout_s, else 300 s), whichever environment or dataset names it.
    heavy: bool = False
    #: The `Task.data` fields it reads, by name.
    fields: dict[str, DataField] = field(default_factory=dict)

    def params(self, values: dict[str, Any]) -> BaseModel:
        try:
            params = self.params_model.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise VerifierParamsError(f"verifier {self.name!r} parameters: {problems}") from None
        # `rel_tol=inf` would pass every answer, and the version's JSON would hold `Infinity`
        infinite = [
            f"{key}: {value} is not a finite number"
            for key, value in params.model_dump().items()
            if isinstance(value, float) and not math.isfinite(value)
        ]
        if infinite:
            raise VerifierParamsError(f"verifier {self.name!r} parameters: {'; '.join(infinite)}")
        return params

    def version(self, params: BaseModel) -> str:
        blob = json.dumps(params.model_dump(mode="json"), sort_keys=True).encode()
        return f"{self.name}@{hashlib.sha256(blob).hexdigest()[:8]}"


REGISTRY: dict[str, VerifierSpec] = {}


def verifier(
    name: str,
    *,
    params: type[BaseModel],
    reward_range: tuple[float, float] = (0.0, 1.0),
    pass_threshold: float = 1.0,
    io_bound: bool = False,
    heavy: bool = False,
    fields: dict[str, DataField] | None = None,
) -> Callable[[VerifyFn], VerifyFn]:
    """Register a verify function under `name` with its parameter model."""

    def register(fn: VerifyFn) -> VerifyFn:
        REGISTRY[name] = VerifierSpec(
            name=name,
            params_model=params,
            fn=fn,
            reward_range=reward_range,
            pass_threshold=pass_threshold,
            description=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "",
            io_bound=io_bound,
            heavy=heavy,
            fields=dict(fields or {}),
        )
        return fn

    return register


def get_verifier(name: str) -> VerifierSpec:
    import gymflow.verifiers  # noqa: F401  (registers the built-in verifiers)

    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UnknownVerifier(f"unknown verifier {name!r} (known: {known})") from None
