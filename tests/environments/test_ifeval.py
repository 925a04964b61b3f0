"""ifeval: each constraint, strict and loose grading, the generated tasks, and a run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from gymflow.core.tasks import Task
from gymflow.environments.registry import load_environment
from gymflow.verifiers.base import VerifierError, VerifyInput, get_verifier
from tests.conftest import gym

SPEC = get_verifier("ifeval")
STRICT = SPEC.params({"mode": "strict"})
LOOSE = SPEC.params({"mode": "loose"})


def _task(*constraints: dict) -> Task:
    return Task("t-1", {}, {"constraints": list(constraints)}, "", "")


def _grade(text: str, *constraints: dict, params=STRICT):
    return SPEC.fn(VerifyInput(_task(*constraints), text), params)


CASES = [
    # (constraint, a response meeting it, a response breaking it)
    ({"kind": "word_count", "relation": "at_least", "n": 5}, "one two three four five", "one two"),
    ({"kind": "word_count", "relation": "at_most", "n": 3}, "one two three", "one two three four"),
    ({"kind": "sentence_count", "relation": "at_least", "n": 2}, "A b. C d!", "Just one."),
    ({"kind": "sentence_count", "relation": "at_most", "n": 1}, "Just one.", "One. Two."),
    ({"kind": "include_keywords", "keywords": ["budget"]}, "A Budget plan.", "Budgeting."),
    ({"kind": "exclude_keywords", "keywords": ["very"]}, "Everything is fine.", "Very fine."),
    ({"kind": "keyword_frequency", "keyword": "tea", "n": 2}, "tea and tea", "tea or steam"),
    ({"kind": "forbidden_chars", "chars": [",", "!"]}, "No commas here.", "Yes, here."),
    ({"kind": "json_format"}, '{"a": [1, 2]}', "```json\n{}\n```\nnot json"),
    ({"kind": "paragraph_count", "n": 2}, "First.\n\nSecond.", "First.\nStill first."),
    ({"kind": "section_count", "n": 2}, "SECTION 1\na\nSECTION 2\nb", "SECTION 1\nonly one"),
    ({"kind": "bullet_count", "n": 2}, "Intro\n- a\n- b", "Intro\n- a\n**b** is bold"),
    ({"kind": "bullet_count", "n": 2}, "Intro\n* a\n- b", "Intro\n* a\n* b\n* c"),
    ({"kind": "lowercase"}, "all small 123.", "Not all small."),
    ({"kind": "uppercase"}, "ALL CAPS!", "ALL CAPS but not"),
    ({"kind": "start_phrase", "phrase": "In short"}, "in short, yes.", "Yes, in short."),
    (
        {"kind": "end_phrase", "phrase": "Any other questions?"},
        "Done. Any other questions?",
        "Any other questions? Done.",
    ),
    ({"kind": "title"}, "<<My Title>>\nText.", "<My Title>\nText."),
]


@pytest.mark.parametrize(("constraint", "good", "bad"), CASES, ids=[c[0]["kind"] for c in CASES])
def test_each_constraint_on_positive_and_negative(constraint, good, bad) -> None:
    passed = _grade(good, constraint)
    assert passed.reward == 1.0, passed.details
    assert passed.details["constraints"][0]["passed"] is True
    failed = _grade(bad, constraint)
    assert failed.reward == 0.0, failed.details
    assert failed.details["first_failure"].startswith(constraint["kind"])


QUOTED = [
    # (constraint, a response that opens with (or is wrapped in) quote marks and meets it)
    ({"kind": "section_count", "n": 2}, '"SECTION 1\na\nSECTION 2\nb"'),
    ({"kind": "section_count", "n": 2}, "\u201cSection 1\na\n\u2018Section 2\nb"),
    ({"kind": "bullet_count", "n": 2}, '"- a\n- b"'),
    ({"kind": "start_phrase", "phrase": "In short"}, "\u201cIn short, yes.\u201d"),
    ({"kind": "end_phrase", "phrase": "Any other questions?"}, "'Done. Any other questions?'"),
]


@pytest.mark.parametrize(("constraint", "text"), QUOTED, ids=[c[0]["kind"] for c in QUOTED])
@pytest.mark.parametrize("params", [STRICT, LOOSE], ids=["strict", "loose"])
def test_a_header_or_phrase_after_leading_quotes_counts(constraint, text, params) -> None:
    """As the IFEval reference reads them: its section count splits on the marker wherever it
    stands (a first header after a quote counts), its end check strips quotes."""
    graded = _grade(text, constraint, params=params)
    assert graded.reward == 1.0, graded.details


def test_reward_is_the_fraction_met_and_details_list_each_result() -> None:
    constraints = (
        {"kind": "lowercase"},
        {"kind": "word_count", "relation": "at_most", "n": 4},
        {"kind": "include_keywords", "keywords": ["tea", "cake"]},
    )
    verdict = _grade("i like tea with lemon", *constraints)
    assert verdict.reward == pytest.approx(1 / 3)
    assert [r["passed"] for r in verdict.details["constraints"]] == [True, False, False]
    assert verdict.details["constraints"][1]["reason"] == "5 words; needs at most 4"
    assert verdict.details["constraints"][2]["reason"] == "missing ['cake']"
    assert (verdict.details["met"], verdict.details["total"]) == (1, 3)
    all_or_nothing = SPEC.params({"reward": "all"})
    assert _grade("i like tea with lemon", *constraints, params=all_or_nothing).reward == 0.0


def test_loose_forgives_a_wrapper_line_and_emphasis_but_strict_does_not() -> None:
    lower = {"kind": "lowercase"}
    wrapped = "**Sure!**\nhere is my answer in lowercase."
    assert _grade(wrapped, lower).reward == 0.0
    loose = _grade(wrapped, lower, params=LOOSE)
    assert loose.reward == 1.0
    assert loose.details["constraints"][0]["variant"] == "first line removed"

    start = {"kind": "start_phrase", "phrase": "In short"}
    assert _grade("**In short**, yes.", start).reward == 0.0
    emphasis = _grade("**In short**, yes.", start, params=LOOSE)
    assert (
        emphasis.reward == 1.0
        and "emphasis stripped" in emphasis.details["constraints"][0]["variant"]
    )

    fenced = '```json\n{"a": 1}\n```'
    assert _grade(fenced, {"kind": "json_format"}).reward == 0.0
    fenced_loose = _grade(fenced, {"kind": "json_format"}, params=LOOSE)
    assert fenced_loose.details["constraints"][0]["variant"] == "first and last lines removed"
    # loose is not "anything goes": a violation on every line still fails
    assert _grade("Ab\nCd\nEf", lower, params=LOOSE).reward == 0.0


def test_malformed_answers_and_tasks() -> None:
    empty = _grade("   ", {"kind": "exclude_keywords", "keywords": ["x"]})
    assert empty.reward == 0.0 and empty.details["reason"] == "empty_response"
    with pytest.raises(VerifierError, match="unknown kind 'rhyme'"):
        _grade("text", {"kind": "rhyme"})
    with pytest.raises(VerifierError, match=r"missing \['n'\]"):
        _grade("text", {"kind": "word_count", "relation": "at_least"})
    with pytest.raises(VerifierError, match="non-empty list"):
        SPEC.fn(VerifyInput(Task("t", {}, {}, "", ""), "text"), STRICT)
    with pytest.raises(ValueError, match="mode"):
        SPEC.params({"mode": "lenient"})


def test_generated_tasks() -> None:
    env = load_environment("ifeval")
    tasks = env.tasks("test")
    assert len(tasks) == 300 and len({t.task_id for t in tasks}) == 300
    server = env.resources_server()
    loose_server = env.resources_server({"mode": "loose"})
    loose_only = 0
    for task in tasks:
        assert 1 <= len(task.data["constraints"]) <= 3
        assert len(task.inputs["constraints"]) == len(task.data["constraints"])
        strict_ref = server.verify_sync(VerifyInput(task, task.reference))
        loose_ref = loose_server.verify_sync(VerifyInput(task, task.reference))
        assert loose_ref.passed, (task.task_id, loose_ref.details)
        assert strict_ref.passed == (task.data["reference_passes"] == "strict"), task.task_id
        loose_only += not strict_ref.passed
        for s in (server, loose_server):
            wrong = s.verify_sync(VerifyInput(task, task.distractor))
            assert not wrong.passed, (task.task_id, wrong.details)
            assert wrong.details["first_failure"]
    # enough loose-only references that strict -> loose reverify visibly flips rollouts
    assert 30 <= loose_only <= 120
    again = load_environment("ifeval").dataset_version("test")
    assert env.dataset_version("test") == again


@pytest.mark.prefect  # `gym eval run`: a flow on the suite's Prefect server
def test_ifeval_end_to_end_through_gym_eval_run(tmp_path: Path, prefect_api: str) -> None:
    gym(
        "eval",
        "run",
        "--benchmark",
        "ifeval",
        "--limit",
        "12",
        "--repeats",
        "2",
        "--out",
        "runs/ifeval",
        cwd=tmp_path,
        env={"PREFECT_API_URL": prefect_api},
        check=True,
    )
    con = duckdb.connect(str(tmp_path / "runs" / "ifeval" / "gymflow.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT r.task_id, r.output_text, v.verifier_version, v.reward, v.passed, v.details_json "
        "FROM rollouts r JOIN verifications v USING (rollout_id) WHERE r.status = 'completed'"
    ).fetchall()
    assert len(rows) == 24
    tasks = {t.task_id: t for t in load_environment("ifeval").tasks("test")[:12]}
    played = set()
    for task_id, output, version, reward, passed, details in rows:
        task = tasks[task_id]
        assert version.startswith("ifeval@")
        assert 0.0 <= reward <= 1.0
        assert len(json.loads(details)["constraints"]) == len(task.data["constraints"])
        # the simulated policy plays the reference or the distractor; strict grading passes only
        # references built to pass strictly
        assert output in (task.reference, task.distractor)
        played.add(output == task.reference)
        assert passed == (output == task.reference and task.data["reference_passes"] == "strict")
    assert played == {True, False}
