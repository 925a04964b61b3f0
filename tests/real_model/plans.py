"""The real-model runs, as data: what the end-to-end tests run (`RUNS`) and what
`python -m tests.real_model.record` records as fixtures (`RUNS` and the decision `SCENARIOS`).

Each is small enough for a minute or two on two shared cores: temperature 0, one repeat, a few
tasks and a small output-token limit."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.real_model.conftest import MODEL, MODEL_TOOLS

#: The `capitals` dataset benchmarks the scenarios run on (GYMFLOW_ENVIRONMENTS_PATH).
ENVS = Path(__file__).resolve().parent / "envs"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_model"


@dataclass(frozen=True)
class Plan:
    name: str
    benchmark: str
    #: chat: model.kind chat_completions straight to llama.cpp; litellm: `responses` through
    #: LiteLLM's proxy (its Responses bridge to the same server)
    via: Literal["chat", "litellm"]
    limit: int
    max_output_tokens: int
    model: str = MODEL
    overrides: dict[str, Any] = field(default_factory=dict)
    #: scenarios: the one factor broken on purpose, and the action that is then right
    broken: str | None = None
    expected: str | None = None
    #: why today's diagnosis gets the scenario wrong: it then has no scenario.yaml (bench/decide.py
    #: requires every scenario right) and test_recorded.py expects the miss (xfail, strict)
    known_miss: str | None = None


RUNS = (
    Plan("arithmetic", "arithmetic-smoke", "chat", limit=12, max_output_tokens=64),
    Plan("arithmetic-litellm", "arithmetic-smoke", "litellm", limit=6, max_output_tokens=64),
    Plan("math", "math-exact", "chat", limit=8, max_output_tokens=128),
    Plan("ifeval", "ifeval", "chat", limit=8, max_output_tokens=128),
    Plan("humaneval", "humaneval", "chat", limit=5, max_output_tokens=256),
    # llama.cpp ignores the offered tools unless a request names a tool_choice
    Plan("bfcl", "bfcl-smoke", "chat", limit=10, max_output_tokens=48),
    Plan("bfcl-tools", "bfcl-smoke", "litellm", limit=10, max_output_tokens=48, model=MODEL_TOOLS),
)

_CAPITALS = {"benchmark": "capitals", "via": "chat", "limit": 12, "max_output_tokens": 32}
SCENARIOS = (
    Plan(
        "scenario-prompt-form",
        **{**_CAPITALS, "benchmark": "capitals-answer-line"},
        overrides={
            "prompt_template": "What is the capital of {{ country }}? Say it in a full sentence."
        },
        broken="the verifier reads an 'Answer:' line; the prompt asks for a full sentence",
        expected="prompt_change",
    ),
    Plan(
        "scenario-verifier-fullmatch",
        **_CAPITALS,
        overrides={"verifier_params": {"mode": "fullmatch"}},
        broken="regex_match with mode: fullmatch: the city must be the whole answer, and the "
        "model answers in a sentence",
        expected="verifier_repair",
    ),
    Plan(
        "scenario-cut-answers",
        **{**_CAPITALS, "max_output_tokens": 4},
        broken="max_output_tokens 4 cuts the answer before the city",
        expected="harness_work",
    ),
)
#: Runs of RUNS that are decision scenarios as they are.
RUN_SCENARIOS = {
    "arithmetic": ("nothing broken: a 135M model cannot do the arithmetic", "model_training"),
    "bfcl": ("the server ignores the offered tools (no tool_choice sent)", "harness_work"),
}


def scenario(plan: Plan) -> tuple[str, str] | None:
    """(broken, expected) when `plan` is a decision scenario."""
    if plan.name in RUN_SCENARIOS:
        return RUN_SCENARIOS[plan.name]
    return (plan.broken, plan.expected) if plan.expected else None


def by_name(name: str) -> Plan:
    return next(plan for plan in RUNS + SCENARIOS if plan.name == name)
