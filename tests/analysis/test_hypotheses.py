"""Each next action as a hypothesis tested on the stored rollouts, on small constructed stores
whose cause is known: recommended where its prediction holds and by a margin over resampled
tasks, "undecided" otherwise, with what the run cannot show and the experiment that decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymflow.analysis.decide import recommend
from gymflow.analysis.diagnose import diagnose
from gymflow.analysis.results import Decision, Diagnosis
from gymflow.core.records import Verification
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder

ARITHMETIC_PROMPT = (
    "What is {n} + 3?\n\nGive your final answer on its own line as: Answer: <number>"
)


def _diagnose(b: StoreBuilder, path: Path) -> Diagnosis:
    b.write(path)
    con = connect(path, read_only=True)
    try:
        return diagnose(con)
    finally:
        con.close()


def _decide(b: StoreBuilder, path: Path) -> Decision:
    return recommend(_diagnose(b, path), template=b.meta.prompt_template)


def _tasks(b: StoreBuilder, count: int = 12) -> list[str]:
    ids = []
    for i in range(count):
        task = b.task(f"t{i:02}", 100 + i, prompt=ARITHMETIC_PROMPT.format(n=97 + i))
        ids.append(task.task_id)
    return ids


def test_echoes_of_the_prompt_are_the_chat_format_not_the_token_limit(tmp_path: Path) -> None:
    """Gemma 3 270M base behind a chat template: the prompt copied back, cut at the limit. The
    cut answers are echoes, not answers on their way: the chat format, not harness work."""
    b = StoreBuilder(RunMeta(repeats=1, sampling={"temperature": 0.0, "max_output_tokens": 64}))
    for i, task in enumerate(_tasks(b)):
        text = (
            f"What is {97 + i} + 3?\n\nGive your final answer on its own line as: Answer: "
            "<number>\n<number>\n<number>\n<number>\n<number>"
        )
        b.rollout(task, 0, text=text, incomplete=True)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "chat_format", decision.why
    assert decision.evidence.categories == {"echo": 12}
    harness = next(c for c in decision.candidates if c.action == "harness_work")
    assert harness.rollouts == 0  # the limit cut them, but they were on no way to an answer
    assert decision.margin == 1.0
    # the one factor changed: the template, rendered by gymflow, on the same server and weights
    assert decision.experiment.kind == "rerun"
    assert decision.experiment.change == {
        "model": {"kind": "completions", "chat_template": "plain"}
    }
    assert "instruct checkpoint" in decision.label
    # one repeat at temperature 0: skill improvement cannot be seen, and the decision says so
    assert decision.cannot_show and "repeats above one" in decision.cannot_show[0]


def test_a_loop_of_the_placeholder_is_an_echo(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=1, sampling={"temperature": 0.0, "max_output_tokens": 64}))
    for task in _tasks(b):
        b.rollout(task, 0, text="<number>\n" * 16, incomplete=True)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "chat_format" and decision.evidence.categories == {"echo": 12}


def test_cut_answers_on_their_way_are_harness_work(tmp_path: Path) -> None:
    """Cut where the answer line had begun, or holding the expected answer, while the uncut
    repeats read in the verifier's form: the limit cost answers."""
    b = StoreBuilder(RunMeta(repeats=3, sampling={"temperature": 0.7, "max_output_tokens": 16}))
    for task in _tasks(b):
        answer = b.tasks[task].answer
        b.rollout(task, 0)  # uncut, passes
        b.rollout(task, 1, text=f"{answer - 3} + 3 = {answer}, so", incomplete=True)
        b.rollout(task, 2, text="Adding the numbers gives. Answer:", incomplete=True)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "harness_work", decision.why
    assert decision.evidence.categories == {"cut_on_way": 12, "cut_other_form": 12}
    experiment = decision.experiment
    assert experiment.factor == "sampling.max_output_tokens" and experiment.kind == "rerun"
    assert experiment.change == {"sampling": {"max_output_tokens": 64}}
    assert len(experiment.tasks) == 12 and decision.margin >= 0.9


def test_cut_loops_are_not_harness_work(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=1, sampling={"temperature": 0.0, "max_output_tokens": 64}))
    for task in _tasks(b):
        b.rollout(task, 0, text="I will add them. " * 12, incomplete=True)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "model_training", decision.why
    assert decision.evidence.categories == {"cut_astray": 12}
    assert any("not on their way" in note for c in decision.candidates for note in c.notes)


def test_a_cut_answer_outside_the_form_with_nothing_uncut_is_undecided(tmp_path: Path) -> None:
    """A sentence holding the answer, cut before any 'Answer:' line, and nothing left uncut to
    tell whether the prompt or the limit kept the form out: undecided, and raising the limit on
    those tasks decides."""
    b = StoreBuilder(RunMeta(repeats=1, sampling={"temperature": 0.0, "max_output_tokens": 12}))
    for task in _tasks(b):
        text = f"The sum is {b.tasks[task].answer}, which we can check by counting"
        b.rollout(task, 0, text=text, incomplete=True)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "undecided", decision.why
    assert set(decision.undecided) == {"harness_work", "prompt_change"}
    assert decision.experiment.factor == "sampling.max_output_tokens"


def test_answers_in_another_form_are_a_prompt_change(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=2))
    for task in _tasks(b):
        b.rollout(task, 0, text=f"It is {b.tasks[task].answer}, I think.")
        b.rollout(task, 1, correct=False)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "prompt_change", decision.why
    assert decision.evidence.categories == {"other_form": 12}
    experiment = decision.experiment
    assert experiment.kind == "rerun" and "Answer:" in experiment.change["prompt_template"]


def test_a_copied_placeholder_is_a_prompt_change_not_a_wrong_answer(tmp_path: Path) -> None:
    """`Answer: <number>` answers the prompt's description of the form with the description."""
    b = StoreBuilder(RunMeta(repeats=1))
    for task in _tasks(b):
        b.rollout(task, 0, text="Let me see.\nAnswer: <number>")
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "prompt_change", decision.why
    assert decision.evidence.categories == {"placeholder": 12}


def _lenient(b: StoreBuilder, task: str, repeat: int, reason: str) -> None:
    details = {"reason": reason, "pattern": "Paris", "lenient_match": "Paris"}
    verdict = Verification(b.verifier_version, "ok", 0.0, False, None, details)
    b.rollout(task, repeat, text="The capital is Paris.", verification=verdict)


def test_a_lenient_reading_that_passes_is_a_verifier_repair(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=2))
    for task in _tasks(b):
        _lenient(b, task, 0, "wrong_answer")
        b.rollout(task, 1, correct=False)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "verifier_repair", decision.why
    assert decision.evidence.categories == {"lenient_right": 12}
    # the model-side evidence leaves out the rollouts the verifier wrongly failed
    training = next(c for c in decision.candidates if c.action == "model_training")
    assert training.rollouts == 12


@pytest.mark.parametrize(
    ("outcomes", "action"),
    [
        (["1000"] * 10 + ["0000"] * 2, "skill_improvement"),
        (["0000"] * 10 + ["1000"] * 2, "model_training"),
    ],
)
def test_skill_or_capability_by_a_clear_margin(outcomes, action, tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=4))
    for task, marks in zip(_tasks(b), outcomes, strict=True):
        b.fill(task, marks)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == action and decision.margin >= 0.9, decision.why
    assert decision.cannot_show == []


def test_evidence_that_does_not_separate_two_actions_is_undecided(tmp_path: Path) -> None:
    """The demo's case: skill improvement and model training on nearly equal evidence. Not a
    coin flip between them but "undecided", with the experiment that decides: more repeats on
    the tasks that never passed."""
    b = StoreBuilder(RunMeta(repeats=4))
    for task, marks in zip(_tasks(b), ["1000", "0000"] * 6, strict=True):
        b.fill(task, marks)
    decision = _decide(b, tmp_path / "run")
    assert decision.action == "undecided", decision.why
    assert set(decision.undecided) == {"skill_improvement", "model_training"}
    assert decision.margin < 0.9 and "undecided between" in decision.label
    experiment = decision.experiment
    assert experiment.factor == "repeats" and experiment.change["repeats"] == 16
    never = [t for i, t in enumerate(_tasks(StoreBuilder())) if i % 2]
    assert experiment.tasks == never


def test_the_margin_is_the_same_for_the_same_evidence(tmp_path: Path) -> None:
    b = StoreBuilder(RunMeta(repeats=4))
    for task, marks in zip(_tasks(b), ["1100", "0000", "0000"] * 4, strict=True):
        b.fill(task, marks)
    result = _diagnose(b, tmp_path / "run")
    assert recommend(result) == recommend(result)
