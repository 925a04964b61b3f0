"""Instruction following: verifiable constraints on the form of a response (IFEval-style).

Each task carries its constraints as data (`{"kind": ..., **params}`); this module holds one check
per kind. Two grading modes, so reverify can switch between them without inference:

- strict: the response as given.
- loose: a constraint also counts as met when it holds for the response with its first line, its
  last line or both removed, or with markdown emphasis (`*`, `**`) stripped, as IFEval's loose
  accuracy does. A model that opens with "**Sure!**" or closes with an offer of more help is not
  failed for the wrapper around an otherwise compliant answer.

The reward is the fraction of constraints met (partial credit shows how close a response came);
a task passes only with every constraint met (pass threshold 1.0), or set `reward: all` to make
the reward itself all-or-nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import DataField, Verdict, VerifierError, VerifyInput, verifier

_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
#: Quote marks a response may open with or wrap itself in. A header or phrase after them is read
#: as if they were not there, as the IFEval reference reads a response starting `"SECTION 1`: its
#: section count splits on the marker wherever it stands, and its end check strips quotes.
QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e"
_LINE_START = rf"^[ \t]*[{QUOTES}]*[ \t]*"
_SECTION = re.compile(_LINE_START + r"section\s*\d+\b", re.IGNORECASE | re.MULTILINE)
#: A bullet as the IFEval reference counts one: a line starting `* ` (a `*` not opening `**`
#: bold) or `- `. The prompt asks for `- `; a model answering with `*` bullets followed it, and
#: the reference passes it (SmolLM2 did, and gymflow alone failed it).
_BULLET = re.compile(_LINE_START + r"(?:- \S|\*[^*\n])", re.MULTILINE)
_TITLE = re.compile(r"<<[^<>\n]+>>")

Check = Callable[[str, dict[str, Any]], tuple[bool, str]]


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    parts = _SENTENCE_END.split(text)
    return [p for p in parts if words(p)]


def paragraphs(text: str) -> list[str]:
    return [p for p in _PARAGRAPH_BREAK.split(text.strip()) if p.strip()]


def _compare(value: int, relation: str, n: int) -> bool:
    return value >= n if relation == "at_least" else value <= n


def _count(counter: Callable[[str], list[str]], unit: str) -> Check:
    def check(text: str, p: dict[str, Any]) -> tuple[bool, str]:
        value = len(counter(text))
        rel = p["relation"].replace("_", " ")
        return _compare(value, p["relation"], p["n"]), f"{value} {unit}; needs {rel} {p['n']}"

    return check


def _has_word(text: str, word: str) -> int:
    return len(re.findall(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", text, re.I))


def _include(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    missing = [k for k in p["keywords"] if not _has_word(text, k)]
    return not missing, f"missing {missing}" if missing else "all keywords present"


def _exclude(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    found = [k for k in p["keywords"] if _has_word(text, k)]
    return not found, f"uses forbidden {found}" if found else "no forbidden words"


def _frequency(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    count = _has_word(text, p["keyword"])
    return count >= p["n"], f"{p['keyword']!r} appears {count} times; needs at least {p['n']}"


def _forbidden_chars(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    found = [c for c in p["chars"] if c in text]
    return not found, f"contains {found}" if found else "no forbidden characters"


def _json(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    try:
        json.loads(text.strip())
    except ValueError as exc:
        return False, f"not valid JSON: {exc}"
    return True, "valid JSON"


def _exactly(counter: Callable[[str], int], unit: str) -> Check:
    def check(text: str, p: dict[str, Any]) -> tuple[bool, str]:
        value = counter(text)
        return value == p["n"], f"{value} {unit}; needs exactly {p['n']}"

    return check


def _lowercase(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    upper = sorted({c for c in text if c.isupper()})
    return not upper, f"has capitals {''.join(upper[:10])}" if upper else "all lowercase"


def _uppercase(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    lower = sorted({c for c in text if c.islower()})
    return not lower, f"has lowercase {''.join(lower[:10])}" if lower else "all capitals"


def _unquoted(text: str) -> str:
    """The text without surrounding whitespace and quote marks."""
    return text.strip().strip(QUOTES).strip()


def _start(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    head = _unquoted(text).lower()
    ok = head.startswith(p["phrase"].lower())
    return ok, "starts with the phrase" if ok else f"starts with {text.strip()[:40]!r}"


def _end(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    tail = _unquoted(text).lower()
    ok = tail.endswith(p["phrase"].lower())
    return ok, "ends with the phrase" if ok else f"ends with {text.strip()[-40:]!r}"


def _title(text: str, p: dict[str, Any]) -> tuple[bool, str]:
    ok = bool(_TITLE.search(text))
    return ok, "has a <<title>>" if ok else "no <<title>> found"


#: kind -> (check, required parameters)
CHECKS: dict[str, tuple[Check, tuple[str, ...]]] = {
    "word_count": (_count(words, "words"), ("relation", "n")),
    "sentence_count": (_count(sentences, "sentences"), ("relation", "n")),
    "include_keywords": (_include, ("keywords",)),
    "exclude_keywords": (_exclude, ("keywords",)),
    "keyword_frequency": (_frequency, ("keyword", "n")),
    "forbidden_chars": (_forbidden_chars, ("chars",)),
    "json_format": (_json, ()),
    "paragraph_count": (_exactly(lambda t: len(paragraphs(t)), "paragraphs"), ("n",)),
    "section_count": (_exactly(lambda t: len(_SECTION.findall(t)), "sections"), ("n",)),
    "bullet_count": (_exactly(lambda t: len(_BULLET.findall(t)), "bullets"), ("n",)),
    "lowercase": (_lowercase, ()),
    "uppercase": (_uppercase, ()),
    "start_phrase": (_start, ("phrase",)),
    "end_phrase": (_end, ("phrase",)),
    "title": (_title, ()),
}


def loose_variants(text: str) -> list[tuple[str, str]]:
    """(name, text) pairs loose mode tries: first/last/both lines removed, emphasis stripped."""
    lines = text.split("\n")
    cut = {
        "as given": text,
        "first line removed": "\n".join(lines[1:]),
        "last line removed": "\n".join(lines[:-1]),
        "first and last lines removed": "\n".join(lines[1:-1]),
    }
    variants = []
    for name, body in cut.items():
        variants.append((name, body))
        variants.append((f"{name}, emphasis stripped", body.replace("*", "")))
    return [(name, body) for name, body in variants if body.strip()]


def check_constraint(text: str, constraint: dict[str, Any], mode: str) -> dict[str, Any]:
    check, _ = CHECKS[constraint["kind"]]
    ok, reason = check(text, constraint)
    result = {"kind": constraint["kind"], "passed": ok, "reason": reason}
    if ok or mode == "strict":
        return result
    for name, variant in loose_variants(text)[1:]:
        variant_ok, variant_reason = check(variant, constraint)
        if variant_ok:
            return {**result, "passed": True, "reason": variant_reason, "variant": name}
    return result


def _validated(constraints: Any, task_id: str) -> list[dict[str, Any]]:
    if not isinstance(constraints, list) or not constraints:
        raise VerifierError(f"task {task_id}: data.constraints must be a non-empty list")
    for i, c in enumerate(constraints):
        if not isinstance(c, dict) or c.get("kind") not in CHECKS:
            kind = c.get("kind") if isinstance(c, dict) else c
            raise VerifierError(f"task {task_id}: constraint {i}: unknown kind {kind!r}")
        missing = [p for p in CHECKS[c["kind"]][1] if p not in c]
        if missing:
            raise VerifierError(f"task {task_id}: constraint {i} ({c['kind']}): missing {missing}")
    return constraints


class IfevalParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["strict", "loose"] = Field(
        "strict",
        description="loose also accepts the answer without its first/last line or "
        "markdown emphasis",
    )
    reward: Literal["fraction", "all"] = Field(
        "fraction", description="fraction of constraints met, or 1/0 for all met"
    )


@verifier(
    "ifeval",
    for_data=True,
    params=IfevalParams,
    fields={"constraints": DataField("list")},
    no_answer_reasons=("empty_response",),
)
def ifeval(inp: VerifyInput, params: IfevalParams) -> Verdict:
    """Fraction of the task's verifiable constraints the response meets (strict or loose)."""
    constraints = _validated(inp.task.data.get("constraints"), inp.task.task_id)
    text = inp.output_text or ""
    if not text.strip():
        return Verdict(
            0.0,
            {"mode": params.mode, "reason": "empty_response", "met": 0, "total": len(constraints)},
        )
    results = [check_constraint(text, c, params.mode) for c in constraints]
    met = sum(r["passed"] for r in results)
    fraction = met / len(results)
    reward = fraction if params.reward == "fraction" else float(met == len(results))
    details: dict[str, Any] = {
        "mode": params.mode,
        "met": met,
        "total": len(results),
        "constraints": results,
        "reason": "all_met" if met == len(results) else "constraint_failed",
    }
    failed = next((r for r in results if not r["passed"]), None)
    if failed is not None:
        details["first_failure"] = f"{failed['kind']}: {failed['reason']}"
    return Verdict(reward, details)
