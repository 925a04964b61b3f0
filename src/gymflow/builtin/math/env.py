"""Math problems with exact answers, generated from a fixed seed: fraction arithmetic, linear
equations, algebraic simplification and radicals. Task `math-00042` is the same on every machine.

Each task stores its gold answer as LaTeX. The reference response writes the answer in one of its
equivalent forms (`\\frac{3}{4}`, `3/4`, `0.75`; `x = -\\frac{5}{3}`; `3 + x`; `\\sqrt{72}`), so
a verifier that compares strings instead of mathematics fails it; the distractor boxes a
plausible wrong answer (an off-by-one numerator, a sign error, a wrong term)."""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction

from gymflow.core.tasks import Task
from gymflow.environments.base import Environment

SEED = 20261130

# (question, gold answer LaTeX, equivalent forms for the reference, wrong answer LaTeX, difficulty)
Problem = tuple[str, str, list[str], str, str]


def latex_fraction(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _forms(value: Fraction) -> list[str]:
    """Equivalent ways to write a rational number: LaTeX fraction, a/b, and a terminating
    decimal when there is one."""
    forms = [latex_fraction(value)]
    if value.denominator != 1:
        forms.append(f"{value.numerator}/{value.denominator}")
        rest = value.denominator
        for prime in (2, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            forms.append(f"{float(value):g}")
    return forms


def _fraction(rng: random.Random) -> Fraction:
    return Fraction(rng.randint(1, 12), rng.randint(2, 12))


def fraction_arithmetic(rng: random.Random) -> Problem:
    a, b = _fraction(rng), _fraction(rng)
    op = rng.choice("+-*/")
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
    symbol = {"+": "+", "-": "-", "*": "\\times", "/": "\\div"}[op]
    question = (
        f"Compute ${latex_fraction(a)} {symbol} {latex_fraction(b)}$ and write the result as a "
        "fraction in lowest terms."
    )
    wrong = Fraction(value.numerator + 1, value.denominator)
    difficulty = "easy" if op in "+-" else "medium"
    return question, latex_fraction(value), _forms(value), latex_fraction(wrong), difficulty


def linear_equation(rng: random.Random) -> Problem:
    a, c = rng.sample([n for n in range(-9, 10) if n], 2)
    b, d = rng.randint(-20, 20), rng.randint(-20, 20)
    x = Fraction(d - b, a - c)

    def side(k: int, m: int) -> str:
        term = {1: "x", -1: "-x"}.get(k, f"{k}x")
        return term if m == 0 else f"{term} {'+' if m > 0 else '-'} {abs(m)}"

    question = f"Solve for $x$: ${side(a, b)} = {side(c, d)}$."
    wrong = -x if x != 0 else Fraction(1)
    forms = [f"x = {form}" for form in _forms(x)] + _forms(x)
    return question, latex_fraction(x), forms, latex_fraction(wrong), "medium"


def simplify_quotient(rng: random.Random) -> Problem:
    a = rng.choice([n for n in range(-9, 10) if n])
    b = rng.randint(1, 9)
    # (x + a)(x + b) / (x + b) = x + a, written out expanded in the question
    question = (
        f"Simplify $\\frac{{x^2 {_signed(a + b)}x {_signed(a * b)}}}{{x {_signed(b)}}}$ "
        f"for $x \\neq {-b}$."
    )
    gold = f"x {_signed(a)}"
    forms = [gold, f"{a} + x", f"\\frac{{(x {_signed(a)})(x {_signed(b)})}}{{x {_signed(b)}}}"]
    return question, gold, forms, f"x {_signed(-a)}", "hard"


def expand_product(rng: random.Random) -> Problem:
    a, b = rng.randint(-9, 9), rng.randint(1, 9)
    question = f"Expand $(x {_signed(a)})(x {_signed(b)})$."
    gold = f"x^2 {_signed(a + b)}x {_signed(a * b)}"
    forms = [gold, f"x^2 + {a + b}x + {a * b}".replace("+ -", "- ")]
    wrong = f"x^2 {_signed(a + b)}x {_signed(a * b + 1)}"
    return question, gold, forms, wrong, "easy"


def simplify_radical(rng: random.Random) -> Problem:
    k = rng.randint(2, 9)
    m = rng.choice([2, 3, 5, 6, 7, 10, 11, 13])
    question = f"Simplify $\\sqrt{{{k * k * m}}}$ to the form $a\\sqrt{{b}}$ with $b$ squarefree."
    gold = f"{k}\\sqrt{{{m}}}"
    forms = [gold, f"\\sqrt{{{m}}} \\cdot {k}", f"\\sqrt{{{k * k * m}}}"]
    return question, gold, forms, f"{k + 1}\\sqrt{{{m}}}", "medium"


def _signed(n: int) -> str:
    return f"+ {n}" if n >= 0 else f"- {-n}"


GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "fraction_arithmetic": fraction_arithmetic,
    "linear_equation": linear_equation,
    "simplify_quotient": simplify_quotient,
    "expand_product": expand_product,
    "simplify_radical": simplify_radical,
}


def make_task(index: int) -> Task:
    rng = random.Random(f"{SEED}:{index}")
    kind = list(GENERATORS)[index % len(GENERATORS)]
    question, gold, forms, wrong, difficulty = GENERATORS[kind](rng)
    form = forms[rng.randrange(len(forms))]
    return Task(
        task_id=f"math-{index:05d}",
        inputs={"question": question},
        data={"answer": gold, "question": question, "kind": kind},
        reference=f"Working through it carefully, the answer is $\\boxed{{{form}}}$.",
        distractor=f"Working through it carefully, the answer is $\\boxed{{{wrong}}}$.",
        tags=(kind,),
        difficulty=difficulty,
    )


class MathEnvironment(Environment):
    def generate(self, split: str) -> list[Task]:
        size = self.manifest.splits[split].size or 0
        return [make_task(i) for i in range(size)]
