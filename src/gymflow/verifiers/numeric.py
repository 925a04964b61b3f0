"""Numeric answer match: the answer a response commits to, compared with the reference number."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import DataField, Verdict, VerifyInput, verifier

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?"
_ANSWER_LINE = re.compile(rf"answer\s*[:=]\s*\$?\s*({_NUMBER})", re.IGNORECASE)
_ANY_NUMBER = re.compile(_NUMBER)


class NumericParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    extract: Literal["answer_line", "last_number"] = Field(
        "answer_line",
        description="answer_line reads the number after 'Answer:'; last_number takes the last "
        "number anywhere in the response (lenient, more false positives).",
    )
    rel_tol: float = Field(
        1e-6, ge=0.0, description="Relative tolerance; not applied to an integer reference."
    )
    abs_tol: float = Field(
        1e-9, ge=0.0, description="Absolute tolerance (an integer reference's only one)."
    )


def parse_exact(text: str) -> int | Fraction | None:
    """The number a text writes, exactly: an int for an integer (most answers; a Fraction costs
    ~10 us, most of a reverify of arithmetic), else a Fraction."""
    text = text.replace(",", "")
    digits = text[1:] if text[:1] == "-" else text
    if digits.isascii() and digits.isdigit():
        return int(text)
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def as_float(exact: int | Fraction) -> float | None:
    try:
        return float(exact)
    except OverflowError:
        # a number past float's range (`Answer: 9…9`, 400 digits) is a wrong answer; as a
        # verifier error it was a failure, left out of the scores the policy earns
        return None


def matches(answer: int | Fraction, expected: object, params: NumericParams) -> bool:
    """Whether the answer is the reference. An integer reference is matched within `abs_tol`
    only, in exact arithmetic (Python compares an int or a Fraction with a float exactly): a
    relative tolerance for rounding let 1000001 pass for 1,000,000 at the default 1e-6, and
    floats cannot tell integers apart past 2^53. Any other reference within either tolerance."""
    reference = parse_exact(str(expected))
    if reference is not None and (isinstance(reference, int) or reference.denominator == 1):
        return abs(answer - reference) <= params.abs_tol
    value = as_float(answer)
    return value is not None and math.isclose(
        value, float(expected), rel_tol=params.rel_tol, abs_tol=params.abs_tol
    )


def extract_answer(text: str, mode: str) -> str | None:
    matches = (_ANSWER_LINE if mode == "answer_line" else _ANY_NUMBER).findall(text)
    return matches[-1] if matches else None


@verifier(
    "numeric_match",
    for_data=True,
    params=NumericParams,
    fields={"answer": DataField("number")},
    # no 'Answer:' line (or no number at all), or one that is no number
    no_answer_reasons=("no_answer_extracted", "unparsable_answer"),
    lenient={"extract": "last_number"},  # the last number anywhere, with or without 'Answer:'
    text_only=True,
)
def numeric_match(inp: VerifyInput, params: NumericParams) -> Verdict:
    """Reward 1 when the extracted number equals the reference within tolerance."""
    expected = float(inp.task.data["answer"])
    raw = extract_answer(inp.output_text, params.extract)
    if raw is None:
        return Verdict(0.0, {"reason": "no_answer_extracted", "expected": expected})
    answer = parse_exact(raw)
    if answer is None or as_float(answer) is None:
        return Verdict(0.0, {"reason": "unparsable_answer", "extracted": raw, "expected": expected})
    ok = matches(answer, inp.task.data["answer"], params)
    return Verdict(
        1.0 if ok else 0.0,
        {"reason": "match" if ok else "wrong_answer", "extracted": raw, "expected": expected},
    )
