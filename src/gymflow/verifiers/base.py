"""Verifiers and their registry. A verifier declares where it is defined its parameters, reward
range and pass threshold, and how it runs and its bound (`runs`, `timeout_s`): no environment,
dataset or config changes either. Its version is its name plus a hash of its parameters."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gymflow.core.errors import RuntimeFailure, UserError
from gymflow.core.registry import Registry
from gymflow.core.tasks import Task


class VerifierParamsError(UserError, ValueError):
    """Verifier parameters (a manifest's, a benchmark's, `--param`) that do not validate. Still a
    ValueError: pydantic validators that check them report it as a field error."""


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
    """What a verify function returns: the reward (passed or failed by the environment's
    threshold) and details the reports show. A verifier that cannot judge raises
    VerifierError instead: a verifier failure, never a reward of 0."""

    reward: float
    details: dict[str, Any] = field(default_factory=dict)
    #: Why a judged answer failed when it is a kind to count apart, not just a wrong answer:
    #: `tampering` (the answer's code touched the harness).
    failure_kind: str | None = None


#: The `details` key of a failed verdict holding what a lenient reading of the same output
#: accepts (the task's pattern found anywhere in it, say): the evidence the diagnosis reads that
#: a reading in another form would change the verdict (a prompt asking for another form, or a
#: verifier parameter that rejects right answers). A verifier declares its lenient reading as
#: parameters (`VerifierSpec.lenient`); the resources server runs it on every failed verdict.
LENIENT_MATCH = "lenient_match"

VerifyFn = Callable[[VerifyInput, Any], Verdict]

#: What a task data field must hold: `scalar` is text or a number; `list` and `mapping` are JSON.
FieldKind = Literal["number", "text", "scalar", "list", "mapping"]

#: How a verifier runs. `inline`: on the caller's thread, unbounded (a quick pure function: sending
#: a rollout to a worker costs more than judging it). `worker`: in a killable worker process,
#: killed past its bound (it runs model-written code or parses untrusted input; a thread cannot be
#: stopped). `threads`: on a thread pool, many at once (it waits on a network service, an LLM
#: judge); the rollout stops waiting past its bound and the call ends on its own network timeouts.
Runs = Literal["inline", "worker", "threads"]
#: The bound of a `worker` or `threads` verifier that declares none.
DEFAULT_TIMEOUT_S = 300.0


class NoParams(BaseModel):
    """The parameters of a verifier that takes none: any given is an error."""

    model_config = ConfigDict(extra="forbid")


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
    #: Where it runs (see `Runs`), whichever environment or dataset names it.
    runs: Runs = "inline"
    #: The longest one verification may take before it is a `verifier_timeout` error; None for
    #: an inline verifier.
    timeout_s: float | None = None
    #: The `Task.data` fields it reads, by name.
    fields: dict[str, DataField] = field(default_factory=dict)
    #: It runs the answer's own code, so a verification that outlives `timeout_s` is the answer
    #: running too long (reward 0, reason `timeout`, counted in every score), not a verifier
    #: failure left out of them: an answer that could make its verification time out (a value
    #: costly to build or compare here) would otherwise take itself out of the denominator.
    #: Likewise a worker the out-of-memory killer ends (reason `memory`; `verifiers.oom`).
    outlived_bound_fails: bool = False
    #: The `details.reason` values of its verdicts that mean "no answer in the expected form"
    #: (no answer line, no boxed answer, no code, an empty response): the diagnosis reads these,
    #: never a list of its own, to tell a missing answer from a wrong one.
    no_answer_reasons: frozenset[str] = frozenset()
    #: Its lenient reading, beside the no-answer reasons: parameters under which the same
    #: verifier reads an answer wherever and however it is written (the pattern anywhere, the
    #: expected answer as a token anywhere, the last number). A failed verdict that passes under
    #: them records what they read as `details.lenient_match`, the evidence of a verifier
    #: parameter that rejects right answers (or, with a no-answer reason, of an answer in
    #: another form), and `gym eval decide --confirm` reverifies with them, a what-if that makes
    #: no model call. None: no reading is more lenient than the verifier's own (the code runs,
    #: the instructions are checked as written).
    lenient: dict[str, Any] | None = None
    #: Its verdict is a pure function of the task and the final output text: it reads neither
    #: the trajectory nor session state, and judges the same text the same way every time (no
    #: model judge). A reverify then reads only the text and judges each distinct text of a
    #: task once: most of a large run's repeats give one of a few answers.
    text_only: bool = False
    #: It loads code from the task's data (HumanEval's tests) into the trusted process: that
    #: data is taken from the benchmark only, never from a store's copy (`task_source.py`).
    task_code: bool = False

    def params(self, values: dict[str, Any]) -> BaseModel:
        try:
            params = self.params_model.model_validate(values)
        except ValidationError as exc:
            known = ", ".join(self.params_model.model_fields) or "none"
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: "
                + (
                    f"not a parameter of {self.name} (its parameters: {known})"
                    if e["type"] == "extra_forbidden"
                    else e["msg"]
                )
                for e in exc.errors()
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


#: Every verifier by name: the built-ins, then those an environment's module registers on import.
VERIFIERS: Registry[VerifierSpec] = Registry(
    "verifier", builtins=lambda: importlib.import_module("gymflow.verifiers")
)


def verifier(
    name: str,
    *,
    params: type[BaseModel] | None = None,
    runs: Runs = "inline",
    timeout_s: float | None = None,
    reward_range: tuple[float, float] = (0.0, 1.0),
    pass_threshold: float = 1.0,
    fields: dict[str, DataField] | None = None,
    outlived_bound_fails: bool = False,
    no_answer_reasons: tuple[str, ...] = (),
    lenient: dict[str, Any] | None = None,
    text_only: bool = False,
    task_code: bool = False,
    for_data: bool = False,
) -> Callable[[VerifyFn], VerifyFn]:
    """Register a verify function under `name` with its parameter model (none: it takes no
    parameters), how it runs and its bound (`timeout_s`, default 300 s for a `worker` or
    `threads` verifier), and which of its verdicts' reasons mean the output held no answer in
    the form it reads (`no_answer_reasons`), its lenient reading (`lenient`: parameters; see
    `VerifierSpec.lenient`), whether its verdict is a pure function of the
    task and the output text (`text_only`), and whether a benchmark found only on the data path
    may choose it (`for_data`: it reads a row as data only, never as code, and starts or calls
    no server; `Registry.register`)."""
    if runs not in ("inline", "worker", "threads"):
        raise ValueError(f"verifier {name!r}: runs={runs!r} (known: inline, worker, threads)")
    if runs == "inline" and timeout_s is not None:
        raise ValueError(
            f"verifier {name!r}: an inline verifier cannot be bounded; "
            "declare runs='worker' (or 'threads') with timeout_s"
        )
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"verifier {name!r}: timeout_s={timeout_s} is not a positive number")
    bound = timeout_s if timeout_s is not None or runs == "inline" else DEFAULT_TIMEOUT_S

    def register(fn: VerifyFn) -> VerifyFn:
        VERIFIERS.register(
            name,
            VerifierSpec(
                name=name,
                params_model=params or NoParams,
                fn=fn,
                reward_range=reward_range,
                pass_threshold=pass_threshold,
                runs=runs,
                timeout_s=bound,
                fields=dict(fields or {}),
                outlived_bound_fails=outlived_bound_fails,
                no_answer_reasons=frozenset(no_answer_reasons),
                lenient=dict(lenient) if lenient is not None else None,
                text_only=text_only,
                task_code=task_code,
            ),
            for_data=for_data,
        )
        return fn

    return register


def get_verifier(name: str) -> VerifierSpec:
    """The verifier registered as `name`. Raises UnknownName (gymflow.core.registry)."""
    return VERIFIERS.get(name)
