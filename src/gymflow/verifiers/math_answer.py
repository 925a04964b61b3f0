"""Exact math answers compared with the `math-verify` package: the response's last `\\boxed{}` is
parsed (LaTeX, fractions, expressions, equations such as `x = 3`) and checked for mathematical
equivalence with the task's gold answer (`data["answer"]`, LaTeX).

math-verify guards its own work with `signal.alarm`, which only works in the main thread; gymflow
verifies in worker threads, so its timeouts are switched off and inputs that could make sympy run
away (very long answers, power towers, huge exponents or factorials) are refused before parsing."""

from __future__ import annotations

import logging
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import DataField, Verdict, VerifierError, VerifyInput, verifier

# math-verify warns on every call that its timeouts are off; they are off on purpose (see above).
logging.getLogger("math_verify").setLevel(logging.ERROR)

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# A power inside an exponent (`9^{9^{9}}`), a chained power (`a^b^c`), a large exponent, or a
# large factorial: each can keep sympy computing for minutes with the GIL held.
_RUNAWAY = (
    re.compile(r"\^\s*\{[^{}]*\^"),
    re.compile(r"\^\s*\([^()]*\^"),
    re.compile(r"\^\s*(?:\{[^{}]*\}|\d+|\w)\s*\^"),
    re.compile(r"\^\s*\{?\s*\d{5,}"),
    re.compile(r"\d{5,}\s*!"),
    re.compile(r"\*\*"),
)


class MathAnswerParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    require_boxed: bool = Field(
        True,
        description="Read only the last \\boxed{} answer; when false, math-verify's own "
        "extraction (the last LaTeX or plain expression) is used as a fallback.",
    )
    float_rounding: int = Field(6, ge=0, le=15, description="Decimal places compared.")
    strict: bool = Field(
        True, description="math-verify strict mode: variables and relations must match."
    )
    max_answer_chars: int = Field(400, ge=1, le=10000)


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (balanced braces), or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for index in range(start, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:index]
    return None  # unbalanced: the answer was cut off


def runaway(expression: str) -> bool:
    return any(pattern.search(expression) for pattern in _RUNAWAY)


def parse_gold(answer: str) -> list[Any]:
    from math_verify import parse

    parsed = parse(f"${answer}$", parsing_timeout=None)
    if not parsed:
        raise VerifierError(f"gold answer {answer!r} does not parse", kind="bad_reference")
    return parsed


def parse_answer(text: str) -> list[Any]:
    from math_verify import parse

    return parse(text, parsing_timeout=None)


def equivalent(gold: list[Any], answer: list[Any], params: MathAnswerParams) -> bool:
    from math_verify import verify

    return verify(
        gold,
        answer,
        float_rounding=params.float_rounding,
        strict=params.strict,
        timeout_seconds=None,
    )


#: No \\boxed{} answer (`candidate`), an empty one, or text math-verify cannot read as mathematics.
NO_ANSWER_REASONS = ("no_boxed_answer", "empty_answer", "unparsable_answer")


def candidate(output_text: str, params: MathAnswerParams) -> tuple[str | None, str | None]:
    """(the answer text to parse, or None with the reason there is none)."""
    boxed = last_boxed(output_text)
    if boxed is not None:
        text = boxed
    elif params.require_boxed:
        return None, "no_boxed_answer"
    else:
        text = output_text[-params.max_answer_chars :]
    if not text.strip():
        return None, "empty_answer"
    if len(text) > params.max_answer_chars:
        return None, "answer_too_long"
    if runaway(text):
        return None, "answer_too_complex"
    return (f"$\\boxed{{{text}}}$" if boxed is not None else text), None


@verifier(
    "math_answer",
    for_data=True,
    params=MathAnswerParams,
    runs="worker",
    timeout_s=300.0,
    fields={"answer": DataField("scalar")},
    no_answer_reasons=NO_ANSWER_REASONS,
    lenient={"require_boxed": False},  # math-verify's own extraction where nothing is boxed
    text_only=True,
)
def math_answer(inp: VerifyInput, params: MathAnswerParams) -> Verdict:
    """Reward 1 when the boxed answer is mathematically equivalent to the gold answer."""
    expected = inp.task.data["answer"]
    gold = parse_gold(expected)
    text, problem = candidate(inp.output_text, params)
    if text is None:
        return Verdict(0.0, {"reason": problem, "expected": expected})
    extracted = last_boxed(inp.output_text) or text
    answer = parse_answer(text)
    ok = bool(answer) and equivalent(gold, answer, params)
    if ok:
        reason = "match"
    elif all(isinstance(item, str) for item in answer):
        # math-verify keeps text it cannot read as mathematics and compares it as a string
        reason = "unparsable_answer"
    else:
        reason = "wrong_answer"
    return Verdict(
        1.0 if ok else 0.0, {"reason": reason, "extracted": extracted, "expected": expected}
    )
