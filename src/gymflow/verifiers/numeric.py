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
    rel_tol: float = Field(1e-6, ge=0.0)
    abs_tol: float = Field(1e-9, ge=0.0)


def parse_number(text: str) -> float | None:
    cleaned = text.replace(",", "")
    try:
        return float(Fraction(cleaned))
    except (ValueError, ZeroDivisionError, OverflowError):
        # OverflowError: a number past float's range (`Answer: 9…9`, 400 digits) is a wrong
        # answer; as a verifier error it was a failure, left out of the scores the policy earns
        return None


def extract_answer(text: str, mode: str) -> str | None:
    matches = (_ANSWER_LINE if mode == "answer_line" else _ANY_NUMBER).findall(text)
    return matches[-1] if matches else None


@verifier("numeric_match", params=NumericParams, fields={"answer": DataField("number")})
def numeric_match(inp: VerifyInput, params: NumericParams) -> Verdict:
    """Reward 1 when the extracted number equals the reference within tolerance."""
    expected = float(inp.task.data["answer"])
    raw = extract_answer(inp.output_text, params.extract)
    if raw is None:
        return Verdict(0.0, {"reason": "no_answer_extracted", "expected": expected})
    value = parse_number(raw)
    if value is None:
        return Verdict(0.0, {"reason": "unparsable_answer", "extracted": raw, "expected": expected})
    ok = math.isclose(value, expected, rel_tol=params.rel_tol, abs_tol=params.abs_tol)
    return Verdict(
        1.0 if ok else 0.0,
        {"reason": "match" if ok else "wrong_answer", "extracted": raw, "expected": expected},
    )
