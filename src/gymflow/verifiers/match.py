"""Text match: the response (or the part of it that carries the answer) compared with the task's
expected answer exactly, or searched with the task's regular expression."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import (
    LENIENT_MATCH,
    DataField,
    Verdict,
    VerifierError,
    VerifyInput,
    verifier,
)

_ANSWER_LINE = re.compile(r"answer\s*[:=]\s*(.+)", re.IGNORECASE)
_EDGE_PUNCTUATION = re.compile(r"^[\s\"'`]+|[\s\"'`.,;!]+$")
#: Longest pattern a row may carry: Python's `re` has no time bound, so the pattern's size is one.
MAX_PATTERN_CHARS = 2000


class ExactParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    extract: Literal["full", "answer_line", "last_line", "anywhere"] = Field(
        "full",
        description="full compares the whole response; answer_line the text after the last "
        "'Answer:'; last_line the last non-empty line; anywhere passes the expected answer "
        "found as a whole word anywhere in the response (the lenient reading).",
    )
    ignore_case: bool = True
    collapse_whitespace: bool = Field(
        True, description="Strip the ends and treat every run of whitespace as one space."
    )
    strip_punctuation: bool = Field(
        False, description="Drop trailing . , ; ! and surrounding quotes before comparing."
    )


def extract_text(text: str, mode: str) -> str | None:
    if mode == "answer_line":
        found = _ANSWER_LINE.findall(text)
        return found[-1] if found else None
    if mode == "last_line":
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else None
    return text


def normalize(text: str, params: ExactParams) -> str:
    if params.collapse_whitespace:
        text = " ".join(text.split())
    if params.strip_punctuation:
        text = _EDGE_PUNCTUATION.sub("", text)
    return text.casefold() if params.ignore_case else text


def anywhere(text: str, expected: str, params: ExactParams) -> str | None:
    """The expected answer as it occurs in `text` as a whole word (not inside a longer word or
    number), compared as `normalize` compares; None when it does not."""
    wanted = normalize(expected, params.model_copy(update={"ignore_case": False}))
    if not wanted:
        return None
    flags = re.IGNORECASE if params.ignore_case else 0
    words = r"\s+".join(re.escape(part) for part in wanted.split())
    found = re.search(rf"(?<![\w.]){words}(?![\w]|\.\d)", text, flags)
    return found.group(0) if found else None


@verifier(
    "exact_match",
    for_data=True,
    params=ExactParams,
    fields={"answer": DataField("scalar")},
    no_answer_reasons=("no_answer_extracted",),  # no 'Answer:' line, no non-empty line
    lenient={"extract": "anywhere", "ignore_case": True, "strip_punctuation": True},
    text_only=True,
)
def exact_match(inp: VerifyInput, params: ExactParams) -> Verdict:
    """Reward 1 when the extracted answer equals an expected one after normalisation."""
    answer = inp.task.data["answer"]
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise VerifierError(
            f"data.answer must be text or a number, got {answer!r}", "bad_task_data"
        )
    expected = str(answer)
    if params.extract == "anywhere":
        found = anywhere(inp.output_text or "", expected, params)
        reason = "match" if found is not None else "wrong_answer"
        return Verdict(
            1.0 if found is not None else 0.0,
            {"reason": reason, "extracted": found, "expected": expected},
        )
    raw = extract_text(inp.output_text or "", params.extract)
    if raw is None:
        return Verdict(0.0, {"reason": "no_answer_extracted", "expected": expected})
    got = normalize(raw, params)
    ok = got == normalize(expected, params)
    return Verdict(
        1.0 if ok else 0.0,
        {"reason": "match" if ok else "wrong_answer", "extracted": raw, "expected": expected},
    )


class RegexParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["search", "fullmatch"] = Field(
        "search", description="search: the pattern occurs anywhere; fullmatch: it covers it all."
    )
    extract: Literal["full", "answer_line", "last_line"] = "full"
    ignore_case: bool = False
    multiline: bool = False


# In a worker with a bound: the pattern is the dataset's, the text the model's, and a pattern
# that backtracks (`^(\w+\s?)*$`) took 22 s on 26 characters and grows 4x a character, inline
# on the collector's event loop.
@verifier(
    "regex_match",
    for_data=True,
    params=RegexParams,
    runs="worker",
    timeout_s=10.0,
    fields={"pattern": DataField("text")},
    no_answer_reasons=("no_answer_extracted",),
    lenient={"mode": "search", "extract": "full", "ignore_case": True},
    text_only=True,
)
def regex_match(inp: VerifyInput, params: RegexParams) -> Verdict:
    """Reward 1 when the task's regular expression matches the (extracted) response."""
    pattern = inp.task.data["pattern"]
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        raise VerifierError(f"data.pattern must be text of at most {MAX_PATTERN_CHARS} chars")
    flags = (re.IGNORECASE if params.ignore_case else 0) | (re.MULTILINE if params.multiline else 0)
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise VerifierError(f"data.pattern does not compile: {exc}", "bad_task_data") from None
    text = extract_text(inp.output_text or "", params.extract)
    found = None
    if text is not None:
        found = (
            compiled.search(text) if params.mode == "search" else compiled.fullmatch(text.strip())
        )
    details = {
        "reason": "match" if found else "no_match" if text is not None else "no_answer_extracted",
        "pattern": pattern,
    }
    if found:
        details["matched"] = found.group(0)[:200]
    elif (anywhere := compiled.search(inp.output_text or "")) is not None:
        # the pattern is in the response, where this reading did not look or not as all of it
        details[LENIENT_MATCH] = anywhere.group(0)[:200]
    return Verdict(1.0 if found else 0.0, details)
