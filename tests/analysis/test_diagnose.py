"""Diagnose buckets, taxonomy and suspects, and the decision rules, on constructed runs whose
answers are known."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gymflow.analysis.decide import decide, recommend
from gymflow.analysis.diagnose import diagnose
from gymflow.analysis.results import Diagnosis
from gymflow.analysis.run import analyse
from gymflow.core.records import Verification
from gymflow.core.statuses import FAILED
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym_in_process as gym  # reads stored runs: no process needed


def _diagnose(b: StoreBuilder, path: Path) -> Diagnosis:
    b.write(path)
    con = connect(path, read_only=True)
    try:
        return diagnose(con)
    finally:
        con.close()


def _fail(record, kind: str) -> None:
    record.status, record.failure_kind, record.verification = FAILED, kind, None


def _mixed() -> StoreBuilder:
    b = StoreBuilder(RunMeta(repeats=2))
    for i in range(6):
        b.task(f"t{i}", 100 + i)
    b.fill("t0", "11")  # always
    b.fill("t1", "10")  # sometimes
    b.fill("t2", "00")  # never
    # t3: no rollout at all -> missing
    _fail(b.rollout("t4", 0), "rate_limited")  # model failure
    b.rollout("t4", 1, text="I believe it is 104")  # no Answer: line, 104 in the text
    b.rollout("t5", 0)  # passes
    b.rollout(
        "t5",
        1,
        verification=Verification(b.verifier_version, "error", None, None, "judge_failed", {}),
    )
    return b


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Diagnosis:
    return _diagnose(_mixed(), tmp_path_factory.mktemp("diag") / "run")


def test_buckets(mixed: Diagnosis) -> None:
    ids = {name: bucket.task_ids for name, bucket in mixed.buckets.items()}
    assert ids == {
        "always_pass": ["t0", "t5"],
        "sometimes_pass": ["t1"],
        "never_pass": ["t2", "t4"],
        "missing": ["t3"],
    }
    assert mixed.missing_rollouts == 2


def test_taxonomy(mixed: Diagnosis) -> None:
    counts = {(row.category, row.kind): row.rollouts for row in mixed.taxonomy}
    assert counts == {
        ("wrong_answer", "wrong_answer"): 3,
        ("model_failure", "rate_limited"): 1,
        ("answer_in_other_form", "no_answer_extracted"): 1,
        ("verifier_error", "judge_failed"): 1,
    }
    assert mixed.non_passing_rollouts == 6
    assert sum(row.share for row in mixed.taxonomy) == pytest.approx(1.0)


def test_sometimes_pass_side_by_side(mixed: Diagnosis) -> None:
    (task,) = mixed.sometimes_pass
    assert task.task_id == "t1" and task.variance == pytest.approx(0.25)
    assert task.passing.repeat_index == 0 and "Answer: 101" in task.passing.output
    assert task.failing.repeat_index == 1 and "Answer: 102" in task.failing.output


def _wrong_but_right(b: StoreBuilder, task_id: str, repeat: int) -> None:
    """A verifier that extracted the right answer and still failed it."""
    answer = b.tasks[task_id].answer
    details = {"reason": "wrong_answer", "extracted": f"{answer:,}", "expected": float(answer)}
    b.rollout(
        task_id,
        repeat,
        verification=Verification(b.verifier_version, "ok", 0.0, False, None, details),
    )


def _verifier_case() -> StoreBuilder:
    b = StoreBuilder(RunMeta(repeats=10))
    for i in range(4):
        b.task(f"t{i}", 1000 + i)
    b.fill("t0", "0000000000")
    _wrong_but_right(b, "t1", 0)
    return b


def test_verifier_suspect_right_answer_failed(tmp_path: Path) -> None:
    result = _diagnose(_verifier_case(), tmp_path / "run")
    (suspect,) = result.verifier_suspects
    assert suspect.kind == "extracted_equals_reference" and suspect.count == 1
    evidence = recommend(result).evidence
    # the answer the verifier read is the expected one: evidence for verifier repair, and not
    # also a wrong answer
    assert evidence is not None and evidence.categories == {"lenient_right": 1}
    assert evidence.share == pytest.approx(1 / 11)  # 10 wrong answers + 1 wrongly failed


def test_diagnose_cli(tmp_path: Path) -> None:
    _mixed().write(tmp_path / "run")
    payload = json.loads(gym("eval", "diagnose", "run", "--json", cwd=tmp_path, check=True).stdout)
    assert payload["buckets"]["missing"]["task_ids"] == ["t3"]
    # t3 has no rollout: the run comes first, and the evidence's pick waits as the runner-up
    assert payload["decision"]["action"] == "complete_run"
    assert payload["decision"]["evidence"] is None
    assert payload["decision"]["runner_up"]["action"] in {
        "verifier_repair",
        "harness_work",
        "prompt_change",
        "skill_improvement",
        "model_training",
    }
    text = gym("eval", "diagnose", "run", cwd=tmp_path, check=True).stdout
    assert "next action: complete the run" in text and "sometimes_pass" in text


def test_taxonomy_of_harness_tool_and_truncation_failures(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=7))
    b.task("t0", 5)
    b.rollout("t0", 0, correct=False, counters={"max_turns_reached": 1})
    b.rollout("t0", 1, correct=False, counters={"malformed_tool_calls": 2, "tool_errors": 2})
    b.rollout("t0", 2, correct=False, counters={"tool_errors": 1})
    _fail(b.rollout("t0", 3), "tool_error")
    _fail(b.rollout("t0", 4), "harness_error")
    b.rollout("t0", 5, text="Answer:", incomplete=True)
    b.rollout("t0", 6, correct=False, verification=None)
    result = _diagnose(b, tmp_path / "run")
    counts = {(row.category, row.kind): row.rollouts for row in result.taxonomy}
    assert counts == {
        ("harness_max_turns", "wrong_answer"): 1,
        ("harness_malformed_tool_call", "wrong_answer"): 1,
        ("tool_error", "wrong_answer"): 1,
        ("tool_error", "tool_error"): 1,
        ("harness_error", "harness_error"): 1,
        ("truncated", "no_answer_extracted"): 1,
        ("unverified", ""): 1,
    }
    decision = recommend(result)
    # one unverified rollout in seven is 14% of the evidence: verifier repair comes first
    assert decision.action == "verifier_repair"
    assert decision.runner_up is not None and decision.runner_up.action == "harness_work"
    # the truncated rollout was cut right after 'Answer:': on its way to an answer, the limit
    # cost it; a tool error reported to the model is the model's to handle
    assert decision.runner_up.categories == {"failed_call": 2, "serving": 2, "cut_on_way": 1}


def test_decide_puts_an_incomplete_then_an_unhealthy_run_first(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=2))
    b.task("t0", 10)
    b.task("t1", 11)
    b.fill("t0", "10")
    b.fill("t1", "00")
    con = connect(b.write(tmp_path / "run"), read_only=True)
    try:
        whole = analyse(con)
    finally:
        con.close()
    evidence = recommend(whole.diagnosis)
    assert whole.decision.action == evidence.action
    assert whole.decision.evidence.categories == evidence.evidence.categories
    profile = whole.profile
    incomplete = profile.model_copy(update={"coverage": replace(profile.coverage, missing=1)})
    unhealthy = whole.health.model_copy(
        update={"verdict": "unhealthy", "failing_checks": ["token_mismatch"]}
    )
    lenient = {"verifier_lenient": {"extract": "last_number"}, "template": "{{ question }}"}
    first = decide(unhealthy, incomplete, whole.diagnosis, **lenient)
    assert first.action == "complete_run" and first.evidence is None
    assert first.runner_up == whole.decision.evidence  # what to do once the run is complete
    fix = decide(unhealthy, profile, whole.diagnosis, **lenient)
    assert fix.action == "fix_health" and "token_mismatch" in fix.why
    assert fix.runner_up == whole.decision.evidence


def test_no_answer_without_the_expected_answer_is_a_wrong_answer(tmp_path: Path) -> None:
    """The real arithmetic run: answers lack the 'Answer:' line and the expected number is in
    almost none of them. No reading of them would pass: a capability gap, not a prompt change,
    and the decision says what its evidence is."""
    b = StoreBuilder(RunMeta(repeats=4))
    for i in range(6):
        b.task(f"t{i}", 300 + i)
        for repeat in range(4):
            text = f"I think the result is about {i * 11}."
            if (i, repeat) == (0, 3):
                text = "Roughly 300 in all."  # the one answer holding the expected number
            b.rollout(f"t{i}", repeat, text=text)
    result = _diagnose(b, tmp_path / "run")
    counts = {(row.category, row.kind): row.rollouts for row in result.taxonomy}
    assert counts == {
        ("no_answer", "no_answer_extracted"): 23,
        ("answer_in_other_form", "no_answer_extracted"): 1,
    }
    decision = recommend(result)
    assert decision.action == "model_training", decision.why
    assert decision.evidence.categories == {"wrong": 23}
    prompt = next(c for c in decision.candidates if c.action == "prompt_change")
    assert prompt.categories == {"other_form": 1}


def test_the_verifier_declares_its_no_answer_reasons(tmp_path: Path) -> None:
    """math_answer's `no_boxed_answer` is "no answer in the expected form" as arithmetic's
    missing answer line is: read from the verifier's declaration, the same diagnosis."""
    from gymflow.verifiers import get_verifier

    declared = {
        name: get_verifier(name).no_answer_reasons
        for name in ("numeric_match", "math_answer", "code_exec", "ifeval", "bfcl")
    }
    assert declared["math_answer"] >= {"no_boxed_answer", "empty_answer"}
    assert "no_code" in declared["code_exec"] and "empty_response" in declared["ifeval"]
    assert "no_call" in declared["bfcl"]
    b = StoreBuilder(RunMeta(environment="math", verifier_params={}, repeats=2))
    b.task("t0", 12)
    b.task("t1", 13)
    b.rollout("t0", 0, text="The answer is 12.")  # no \boxed{}, the number elsewhere
    b.rollout("t0", 1, text="I cannot tell.")  # no \boxed{}, no number
    b.rollout("t1", 0, text="So \\boxed{13}.")
    b.rollout("t1", 1, text="So \\boxed{14}.")
    counts = {(r.category, r.kind): r.rollouts for r in _diagnose(b, tmp_path / "run").taxonomy}
    assert counts == {
        ("answer_in_other_form", "no_boxed_answer"): 1,
        ("no_answer", "no_boxed_answer"): 1,
        ("wrong_answer", "wrong_answer"): 1,
    }


def _bfcl_style(b: StoreBuilder, task_id: str, repeat: int, *, passed: bool) -> None:
    """A single-turn rollout whose answer is a function call and no text, as BFCL's are."""
    record = b.rollout(task_id, repeat, text="")
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'}
    record.trajectory = [*record.trajectory[:1], call]
    reason = "match" if passed else "wrong_arguments"
    record.verification = Verification(
        b.verifier_version, "ok", float(passed), passed, None, {"reason": reason}
    )


def test_a_function_call_is_an_answer_and_single_turn_is_never_max_turns(tmp_path: Path):
    b = StoreBuilder(RunMeta(repeats=2))
    b.task("t0", 1)
    b.task("t1", 2)
    _bfcl_style(b, "t0", 0, passed=True)
    _bfcl_style(b, "t0", 1, passed=True)
    _bfcl_style(b, "t1", 0, passed=False)
    _bfcl_style(b, "t1", 1, passed=False)
    result = _diagnose(b, tmp_path / "run")
    assert result.verifier_suspects == []  # the passing calls are answers
    counts = {(row.category, row.kind): row.rollouts for row in result.taxonomy}
    assert counts == {("wrong_answer", "wrong_arguments"): 2}
    assert recommend(result).action == "model_training"


def test_truncation_is_harness_work_only_when_it_cost_answers(tmp_path: Path) -> None:
    """Rambling answers cut at the limit on tasks the policy never solves are the policy's;
    cut on tasks other repeats pass, the limit cost answers."""
    never = StoreBuilder(RunMeta(repeats=4))
    for i in range(5):
        never.task(f"t{i}", 50 + i)
        never.fill(f"t{i}", "0000")
    never.rollouts[0].incomplete = True
    decision = recommend(_diagnose(never, tmp_path / "never"))
    assert decision.action == "model_training"
    assert "not on their way to an answer" in decision.why
    varying = StoreBuilder(RunMeta(repeats=4))
    for i in range(5):
        varying.task(f"t{i}", 50 + i)
        varying.fill(f"t{i}", "1100")
    for record in varying.rollouts[3::4]:  # each task's last repeat: 5 of 20 rollouts
        record.incomplete = True
    decision = recommend(_diagnose(varying, tmp_path / "varying"))
    assert decision.action == "harness_work", decision.why
    assert decision.evidence.categories == {"cut_on_way": 5}
    assert "an uncut repeat passing" in decision.why


def test_a_lenient_reading_of_the_verifier_is_evidence(tmp_path: Path) -> None:
    """`details.lenient_match` (regex_match's pattern found anywhere): with no answer in the form
    read, an answer in another form (prompt change); with an answer read and failed, a verifier
    suspect (a parameter that rejects right answers)."""
    b = StoreBuilder(RunMeta(repeats=4))

    def judged(task: str, repeat: int, reason: str) -> None:
        details = {"reason": reason, "pattern": "Paris", "lenient_match": "Paris"}
        verdict = Verification(b.verifier_version, "ok", 0.0, False, None, details)
        b.rollout(task, repeat, text="The capital is Paris.", verification=verdict)

    for i in range(6):
        b.task(f"t{i}", 7 + i)
        for repeat in range(4):
            judged(f"t{i}", repeat, "no_answer_extracted" if i % 2 else "wrong_answer")
    result = _diagnose(b, tmp_path / "run")
    counts = {(row.category, row.kind): row.rollouts for row in result.taxonomy}
    assert counts[("answer_in_other_form", "no_answer_extracted")] == 12
    (suspect,) = result.verifier_suspects
    assert (suspect.kind, suspect.count) == ("lenient_reading_passes", 12)
    decision = recommend(result)
    assert decision.action == "verifier_repair", decision.why
    assert "12 failed answer(s) the verifier's own lenient reading passes" in decision.why
