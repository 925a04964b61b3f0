"""The real-model runs, as data: what the end-to-end tests run (`RUNS`) and what
`python -m tests.real_model.record` records as fixtures (`RUNS` and the decision `SCENARIOS`).

Each is small enough for a minute or two on two shared cores: temperature 0, one repeat, a few
tasks and a small output-token limit."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.real_model.conftest import GEMMA, MODEL, MODEL_TOOLS

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
    #: the llama.cpp server it runs against (tests.real_model.conftest.SERVERS: model and chat
    #: format)
    server: str = "smollm2"
    repeats: int = 1
    temperature: float = 0.0
    #: scenarios: the one factor broken on purpose, and the action that is then right
    broken: str | None = None
    expected: str | None = None
    #: why today's decision gets the scenario wrong: its scenario.yaml says so (bench/decide.py
    #: shows the miss, explained) and test_recorded.py expects the miss (xfail, strict)
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
#: Gemma 3 270M, the base checkpoint, behind llama.cpp's `gemma` chat format: it does not follow
#: chat turns (it copies the prompt back), whatever the benchmark.
_GEMMA = {"via": "chat", "model": GEMMA, "server": "gemma"}
_CHAT_FORMAT = (
    "nothing but the checkpoint: Gemma 3 270M is a base model, which does not follow chat turns"
)
GEMMA_RUNS = (
    Plan("gemma-arithmetic", "arithmetic-smoke", limit=8, max_output_tokens=64, **_GEMMA,
         broken=_CHAT_FORMAT, expected="chat_format"),
    Plan("gemma-math", "math-exact", limit=6, max_output_tokens=128, **_GEMMA,
         broken=_CHAT_FORMAT, expected="chat_format"),
    Plan("gemma-ifeval", "ifeval", limit=6, max_output_tokens=128, **_GEMMA,
         broken=_CHAT_FORMAT, expected="chat_format"),
    Plan("gemma-humaneval", "humaneval", limit=4, max_output_tokens=192, **_GEMMA,
         broken=_CHAT_FORMAT, expected="chat_format"),
    Plan("gemma-bfcl", "bfcl-smoke", limit=8, max_output_tokens=48, **_GEMMA,
         broken=_CHAT_FORMAT, expected="chat_format"),
)  # fmt: skip
#: The same checkpoint under the Alpaca template (`### Instruction:` / `### Response:`), which
#: a base model continues well, on the capitals: one cause planted at a time.
_ALPACA = {**_CAPITALS, "model": GEMMA, "server": "gemma-alpaca"}
GEMMA_SCENARIOS = (
    Plan(
        "gemma-alpaca-cut",
        **{**_ALPACA, "max_output_tokens": 4},
        broken="max_output_tokens 4 cuts the answer before the city",
        expected="harness_work",
    ),
    Plan(
        "gemma-alpaca-fullmatch",
        **_ALPACA,
        overrides={"verifier_params": {"mode": "fullmatch"}},
        broken="regex_match with mode: fullmatch: the city must be the whole answer",
        expected="verifier_repair",
    ),
    Plan(
        "gemma-alpaca-prose",
        **{**_ALPACA, "benchmark": "capitals-answer-line"},
        overrides={
            "prompt_template": "What is the capital of {{ country }}? Say it in a full sentence."
        },
        broken="the verifier reads an 'Answer:' line; the prompt asks for a full sentence",
        expected="prompt_change",
        known_miss="undecided between verifier repair and model training: under Alpaca the "
        "base model writes numbered lists of questions (6 of 12 outputs hold no city at all, "
        "counted as wrong), 3 cut sentences hold the city with nothing left uncut (the prompt "
        "or the limit), and 1 'Answer:' line holds a sentence the lenient reading passes (9% "
        "of the evidence, verifier repair first at 5%); no action wins 90% of task resamples",
    ),
    Plan(
        "gemma-alpaca-exact-full",
        **{**_ALPACA, "benchmark": "capitals-answer-line"},
        overrides={"verifier_params": {"extract": "full"}},
        broken="exact_match compares the whole response with the city ('Answer: Tokyo' fails)",
        expected="verifier_repair",
    ),
    Plan(
        "gemma-alpaca-tools-ignored",
        "bfcl-smoke",
        via="chat",
        limit=8,
        max_output_tokens=48,
        model=GEMMA,
        server="gemma-alpaca",
        broken="the server's Alpaca handler drops the offered tools",
        expected="harness_work",
        known_miss="chat format, with harness work the runner-up: besides the dropped tools, "
        "the base model writes the Alpaca template's next turns ('### Input:', '### "
        "Instruction:') in 4 of 8 outputs, which is the chat format's evidence: two causes, "
        "and the one found first is the model not following the turn",
    ),
)
#: SmolLM2 sampled warm with repeats, one cause planted at a time. (Under llama-cpp-python's
#: Alpaca format the SmolLM2 server answered no request: left out.)
SMOLLM2_SCENARIOS = (
    Plan(
        "smollm2-warm-prose",
        **{
            **_CAPITALS,
            "benchmark": "capitals-answer-line",
            "repeats": 3,
            "temperature": 0.8,
        },
        overrides={
            "prompt_template": "What is the capital of {{ country }}? Say it in a full sentence."
        },
        broken="the verifier reads an 'Answer:' line; the prompt asks for a full sentence "
        "(temperature 0.8, 3 repeats)",
        expected="prompt_change",
    ),
    Plan(
        "smollm2-warm-arithmetic",
        "arithmetic-smoke",
        via="chat",
        limit=8,
        max_output_tokens=96,
        repeats=3,
        temperature=0.8,
        broken="nothing: a 135M model cannot do the arithmetic (temperature 0.8, 3 repeats)",
        expected="model_training",
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


#: Every plan `python -m tests.real_model.record` records.
ALL = (*RUNS, *SCENARIOS, *GEMMA_RUNS, *GEMMA_SCENARIOS, *SMOLLM2_SCENARIOS)


def by_name(name: str) -> Plan:
    return next(plan for plan in ALL if plan.name == name)
