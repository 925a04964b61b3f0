"""Every verifier declares a lenient reading beside its no-answer reasons, and the resources
server runs it on every failed verdict: what it passes is `details.lenient_match`, the evidence
the decision reads for a verifier repair (or, with a no-answer reason, an answer in another
form)."""

from __future__ import annotations

import importlib

import pytest

from gymflow.core.tasks import Task
from gymflow.environments.registry import load_environment
from gymflow.verifiers.base import LENIENT_MATCH, VERIFIERS, VerifyInput, get_verifier

#: Verifiers with no reading more lenient than their own, and why.
NO_LENIENT_READING = {
    "code_exec": "running the answer's code is the reading",
    "ifeval": "the instructions are checked as written",
    "bfcl": "a call is its name and arguments, compared as the benchmark does",
    "math_judge": "a model judges the answer",
    "state_match": "the session's final state is compared",
    "nemo_gym": "the NeMo Gym server judges",
}


def test_every_verifier_with_no_answer_reasons_declares_a_lenient_reading() -> None:
    importlib.import_module("gymflow.verifiers")
    undeclared = [
        name
        for name in VERIFIERS.names()
        if get_verifier(name).no_answer_reasons
        and get_verifier(name).lenient is None
        and name not in NO_LENIENT_READING
    ]
    assert undeclared == []
    for name in ("exact_match", "regex_match", "numeric_match", "math_answer"):
        spec = get_verifier(name)
        spec.params(spec.lenient)  # its lenient reading is parameters it accepts


def _server(environment: str, **params):
    return load_environment(environment).resources_server(params)


@pytest.mark.parametrize(
    ("text", "passes"),
    [("### Answer: Tokyo", True), ("The capital of Japan is Tokyo.", True),
     ("Tokyoite", False), ("Kyoto", False)],
)  # fmt: skip
def test_exact_match_whole_response_reads_the_answer_anywhere(text, passes) -> None:
    """exact_match comparing the whole response fails 'Answer: Tokyo'; its lenient reading, the
    expected answer as a word anywhere, passes it (and no longer word containing it)."""
    spec = get_verifier("exact_match")
    task = Task("t", {}, {"answer": "Tokyo"}, "", "")
    strict = spec.params({"extract": "full"})
    lenient_params = spec.params({**strict.model_dump(), **spec.lenient})
    assert spec.fn(VerifyInput(task, text), strict).reward == 0.0
    lenient = spec.fn(VerifyInput(task, text), lenient_params)
    assert (lenient.reward == 1.0) == passes
    if passes:
        assert lenient.details["extracted"] == "Tokyo"


def test_the_resources_server_records_what_the_lenient_reading_passes() -> None:
    server = _server("arithmetic", extract="answer_line")
    task = Task("t", {}, {"answer": 42}, "", "")
    failed = server.verify_sync(VerifyInput(task, "I worked it out: 42"))
    assert failed.passed is False and failed.details[LENIENT_MATCH] == "42"
    wrong = server.verify_sync(VerifyInput(task, "I worked it out: 41"))
    assert LENIENT_MATCH not in wrong.details
    right = server.verify_sync(VerifyInput(task, "Answer: 42"))
    assert right.passed and LENIENT_MATCH not in right.details
    # a verifier already as lenient as its lenient reading records nothing more
    assert _server("arithmetic", extract="last_number").lenient_params is None
