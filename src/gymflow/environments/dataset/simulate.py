"""What the local simulated policy can answer on a dataset task, from the fields the verifier reads.

A dataset row rarely carries a whole response that passes, but it carries the answer: for a
numeric, math or exact-match verifier the simulation writes the answer in the form that verifier
reads (and a wrong one beside it); for function-call matching it calls each expected function
with its first allowed arguments. For a regular expression, constraints or code tests there is no
answer to write: such a task is simulated only when the dataset maps a `reference` field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gymflow.core.tasks import ToolCall


@dataclass(frozen=True, slots=True)
class Simulated:
    reference: str = ""
    distractor: str = ""
    reference_actions: tuple[tuple[ToolCall, ...], ...] = ()


#: verifier name -> what the simulation answers from, said to the user
SOURCES = {
    "numeric_match": "the verifier's `answer` field, written as 'Answer: <number>'",
    "math_answer": "the verifier's `answer` field, written as \\boxed{...}",
    "math_judge": "the verifier's `answer` field, written as \\boxed{...}",
    "exact_match": "the verifier's `answer` field, written as the verifier extracts it",
    "bfcl": "the verifier's `ground_truth` calls (first allowed value of each argument)",
}


def _wrong_number(value: Any) -> str:
    number = float(value)
    wrong = number + 1
    return str(int(wrong)) if wrong.is_integer() else str(wrong)


def _exact(answer: Any, params: dict[str, Any]) -> Simulated:
    text = str(answer)
    wrong = f"not {text}"
    if params.get("extract") == "answer_line":
        return Simulated(f"Answer: {text}", f"Answer: {wrong}")
    return Simulated(text, wrong)


def _bfcl(ground_truth: list[dict[str, Any]]) -> Simulated:
    if not ground_truth:  # nothing is relevant: the right move is not to call
        return Simulated("None of the offered functions fits this request.")
    calls = []
    for expected in ground_truth:
        (name, allowed), *_ = expected.items()
        arguments = {
            param: next(o for o in options if o != "")
            for param, options in allowed.items()
            if isinstance(options, list) and options and options[0] != ""
        }
        calls.append(ToolCall(name, arguments))
    return Simulated(reference_actions=(tuple(calls),))


def simulate(verifier: str, params: dict[str, Any], data: dict[str, Any]) -> Simulated:
    """The simulation's answers for one task's verifier data (already type-checked)."""
    if verifier == "numeric_match" and "answer" in data:
        answer = data["answer"]
        return Simulated(f"Answer: {answer}", f"Answer: {_wrong_number(answer)}")
    if verifier in ("math_answer", "math_judge") and "answer" in data:
        return Simulated(f"The answer is $\\boxed{{{data['answer']}}}$.", "I could not solve it.")
    if verifier == "exact_match" and "answer" in data:
        return _exact(data["answer"], params)
    if verifier == "bfcl" and isinstance(data.get("ground_truth"), list):
        return _bfcl(data["ground_truth"])
    return Simulated()
