"""The simulated policy's tool plans: mistakes by skill, malformed calls and their repair."""

from __future__ import annotations

import json

from gymflow.simulated.policy import MISTAKES, PolicyEntry, plan_position

PLAN = [
    [
        {"name": "deposit", "arguments": {"amount": 3}},
        {"name": "deposit", "arguments": {"amount": 9}},
    ],
    [{"name": "balance", "arguments": {}}],
]
TOOLS = ["deposit", "balance"]


def _entry(skill: float, distractor_actions=()) -> PolicyEntry:
    return PolicyEntry("t", "Answer: 12", "Answer: 3", PLAN, list(distractor_actions), skill)


def _draws(**values: float):
    """A draw that returns `values[name]` for the first part naming it, else 0.99 (no event)."""

    def draw(*parts: object) -> float:
        return values.get(str(parts[0]), 0.99)

    return draw


def _played(*turns: list[dict]) -> list[dict]:
    items: list[dict] = [{"type": "message", "role": "user", "content": "go"}]
    for n, calls in enumerate(turns):
        for i, call in enumerate(calls):
            raw = call["arguments"]
            arguments = raw if isinstance(raw, str) else json.dumps(raw)
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"c{n}{i}",
                    "name": call["name"],
                    "arguments": arguments,
                }
            )
        items.extend(
            {"type": "function_call_output", "call_id": f"c{n}{i}", "output": "ok"}
            for i in range(len(calls))
        )
    return items


def test_correct_rollout_follows_the_reference_then_answers() -> None:
    entry = _entry(1.0)
    assert entry.step(_played(), correct=True, tools=TOOLS, draw=_draws()) == PLAN[0]
    assert entry.step(_played(PLAN[0]), correct=True, tools=TOOLS, draw=_draws()) == PLAN[1]
    done = _played(*PLAN)
    assert entry.step(done, correct=True, tools=TOOLS, draw=_draws()) == "Answer: 12"


def test_each_mistake_when_the_task_has_no_distractor_plan() -> None:
    entry = _entry(0.5)
    at_first = {"mistake_turn": 0.0}
    wrong_tool = _draws(mistake=MISTAKES.index("wrong_tool") / 3, **at_first)
    step = entry.step(_played(), correct=False, tools=TOOLS, draw=wrong_tool)
    assert [c["name"] for c in step] == ["balance", "deposit"]

    wrong_args = _draws(mistake=MISTAKES.index("wrong_arguments") / 3, **at_first)
    step = entry.step(_played(), correct=False, tools=TOOLS, draw=wrong_args)
    assert [c["arguments"] for c in step] == [{"amount": 4}, {"amount": 9}]

    early = _draws(mistake=MISTAKES.index("early_stop") / 3, mistake_turn=0.5)
    assert entry.step(_played(), correct=False, tools=TOOLS, draw=early) == PLAN[0]
    assert entry.step(_played(PLAN[0]), correct=False, tools=TOOLS, draw=early) == "Answer: 3"


def test_a_distractor_plan_is_played_as_written() -> None:
    entry = _entry(0.5, distractor_actions=[[{"name": "balance", "arguments": {}}]])
    assert entry.step(_played(), correct=False, tools=TOOLS, draw=_draws()) == [
        {"name": "balance", "arguments": {}}
    ]
    done = _played([{"name": "balance", "arguments": {}}])
    assert entry.step(done, correct=False, tools=TOOLS, draw=_draws()) == "Answer: 3"


def test_malformed_call_then_only_that_call_again() -> None:
    entry = _entry(0.0)
    first = entry.step(_played(), correct=True, tools=TOOLS, draw=_draws(malformed=0.0, how=0.0))
    assert first[0]["arguments"] == '{"amount": 3'  # cut off
    assert first[1] == PLAN[0][1]
    assert plan_position(_played(first), PLAN) == (0, [0])
    again = entry.step(_played(first), correct=True, tools=TOOLS, draw=_draws(malformed=0.9))
    assert again == [PLAN[0][0]]
    assert plan_position(_played(first, again), PLAN) == (1, [])
    typed = entry.step(_played(), correct=True, tools=TOOLS, draw=_draws(malformed=0.0, how=0.9))
    assert json.loads(typed[0]["arguments"]) == {"amount": [3]}  # a wrong type


def test_skill_one_never_makes_malformed_calls() -> None:
    entry = _entry(1.0)
    step = entry.step(_played(), correct=True, tools=TOOLS, draw=_draws(malformed=0.0))
    assert step == PLAN[0]


def test_raw_argument_text_in_a_plan_is_played_once() -> None:
    plan = [[{"name": "deposit", "arguments": '{"amount": '}], *PLAN]
    entry = PolicyEntry("t", "Answer: 12", "Answer: 3", plan, [], 1.0)
    assert entry.step(_played(), correct=True, tools=TOOLS, draw=_draws()) == plan[0]
    assert entry.step(_played(plan[0]), correct=True, tools=TOOLS, draw=_draws()) == PLAN[0]
