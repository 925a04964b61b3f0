"""Arithmetic tasks generated from a fixed seed: task `arith-00042` is the same on every machine."""

from __future__ import annotations

import random

from gymflow.core.tasks import Task
from gymflow.environments.base import Environment

SEED = 20261130

_WORD_PROBLEMS = (
    (
        "A shop sells pencils at {a} cents each. Mia buys {b} pencils and pays with {c} cents "
        "more than the total. How many cents does she hand over?",
        lambda a, b, c: a * b + c,
    ),
    (
        "A train has {a} carriages with {b} seats each. {c} seats are empty. How many seats are "
        "taken?",
        lambda a, b, c: a * b - c,
    ),
    (
        "Leo saves {a} coins a week for {b} weeks, then spends {c} coins. How many coins are left?",
        lambda a, b, c: a * b - c,
    ),
    (
        "A farm packs {a} eggs into boxes of {b}, keeping {c} full boxes. How many eggs are in the "
        "boxes it keeps?",
        lambda a, b, c: b * c,
    ),
)


def _expression(rng: random.Random) -> tuple[str, int, str]:
    ops = rng.randint(2, 5)
    text = str(rng.randint(1, 50))
    for _ in range(ops):
        op = rng.choice("+-*")
        operand = rng.randint(1, 12 if op == "*" else 99)
        text = f"({text} {op} {operand})" if rng.random() < 0.4 else f"{text} {op} {operand}"
    value = eval(text, {"__builtins__": {}})  # our own generated digits and operators only
    difficulty = "easy" if ops <= 2 else "medium" if ops <= 4 else "hard"
    return f"Compute {text}.", value, difficulty


def _word_problem(rng: random.Random) -> tuple[str, int, str]:
    template, answer = rng.choice(_WORD_PROBLEMS)
    a, b = rng.randint(2, 40), rng.randint(2, 30)
    c = rng.randint(1, min(a * b - 1, 60))
    return template.format(a=a, b=b, c=c), answer(a, b, c), "medium"


def make_task(index: int) -> Task:
    rng = random.Random(f"{SEED}:{index}")
    kind = "word_problem" if rng.random() < 0.3 else "expression"
    question, answer, difficulty = (_word_problem if kind == "word_problem" else _expression)(rng)
    wrong = answer + rng.choice((-10, -2, -1, 1, 2, 10))
    return Task(
        task_id=f"arith-{index:05d}",
        inputs={"question": question},
        data={"answer": answer, "question": question},
        reference=f"Working it through step by step gives {answer}.\nAnswer: {answer}",
        distractor=f"Working it through step by step gives {wrong}.\nAnswer: {wrong}",
        tags=(kind,),
        difficulty=difficulty,
    )


class ArithmeticEnvironment(Environment):
    def generate(self, split: str) -> list[Task]:
        size = self.manifest.splits[split].size or 0
        return [make_task(i) for i in range(size)]
