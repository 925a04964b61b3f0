"""The simulated policy's behaviours broken on purpose (`model.simulate`), as the decision
benchmark uses them: each changes one thing about the answers and nothing else."""

from __future__ import annotations

from gymflow.core.config import SimulatedBehaviour
from gymflow.simulated.policy import RAMBLE, PolicyEntry, prompt_key
from gymflow.simulated.policy_server import PolicyApp

PROMPT = "What is 5 + 7?"
CALL_PROMPT = "Deposit 3."
TABLE = {
    prompt_key(PROMPT): PolicyEntry(
        "t", "Working it through gives 12.\nAnswer: 12", "Answer: 13", [], [], 1.0
    ),
    prompt_key(CALL_PROMPT): PolicyEntry(
        "c", "", "", [[{"name": "deposit", "arguments": {"amount": 3}}]], [], 1.0
    ),
}
TOOLS = [{"type": "function", "name": "deposit", "parameters": {"type": "object"}}]


def _reply(behaviour: SimulatedBehaviour, prompt: str = PROMPT, **body) -> dict:
    items = [*body.pop("system", []), {"type": "message", "role": "user", "content": prompt}]
    return PolicyApp(TABLE, behaviour=behaviour).respond({"input": items, "seed": 1, **body})


def _text(reply: dict) -> str:
    return "".join(c.get("text", "") for o in reply["output"] for c in o.get("content", []))


def test_plain_simulation_is_unchanged() -> None:
    assert _text(_reply(SimulatedBehaviour())) == "Working it through gives 12.\nAnswer: 12"
    (call,) = _reply(SimulatedBehaviour(), CALL_PROMPT, tools=TOOLS)["output"]
    assert call["type"] == "function_call"


def test_prose_says_the_answer_in_a_sentence() -> None:
    text = _text(_reply(SimulatedBehaviour(answer_form="prose")))
    assert text == "Working it through gives 12.\nThe answer is 12."


def test_ignored_tools_are_never_called() -> None:
    reply = _reply(SimulatedBehaviour(tools="ignore"), CALL_PROMPT, tools=TOOLS)
    assert [o["type"] for o in reply["output"]] == ["message"]
    assert _text(reply) == 'I would call deposit({"amount": 3}).'


def test_skill_and_rambling_wrong_answers_are_cut_at_the_limit() -> None:
    wrong = _reply(SimulatedBehaviour(skill=0.0), max_output_tokens=64)
    assert _text(wrong) == "Answer: 13" and wrong["status"] == "completed"
    rambling = _reply(SimulatedBehaviour(skill=0.0, ramble=1.0), max_output_tokens=64)
    assert rambling["status"] == "incomplete"
    assert _text(rambling).startswith(RAMBLE * 3) and "Answer" not in _text(rambling)


def test_a_withheld_system_prompt_halves_the_skill() -> None:
    needs = "Check every step."
    behaviour = SimulatedBehaviour(skill=1.0, needs_instructions=needs)
    given = [{"type": "message", "role": "system", "content": needs}]
    right = [_text(_reply(behaviour, system=given, seed=s)).endswith("12") for s in range(40)]
    assert all(right)
    app = PolicyApp(TABLE, behaviour=behaviour)
    items = [{"type": "message", "role": "user", "content": PROMPT}]
    withheld = [_text(app.respond({"input": items, "seed": s})).endswith("12") for s in range(40)]
    assert 8 <= sum(withheld) <= 32  # about half right
