"""Verifications per second for the ifeval and backoffice verifiers, as rows of bench/verifiers.py.

ifeval is timed in both grading modes (loose tries up to eight variants of a failing response per
constraint, so it is the slower one on wrong answers). state_match is timed on backoffice's
final states: each task's reference and distractor plans are played on the tools once, up front,
and the verifier compares those states with the expected one, as it does at the end of a rollout.

    python bench/verifiers_tools.py [--seconds 5] [--workers 1 2] [--only ifeval]

Every row of bench/verifiers.py is printed too, in one table; `--only` picks rows by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers import _cycler, main


def _state_cycler(environment: str, split: str) -> Callable[[], Any]:
    from gymflow.builtin.backoffice.tasks import play

    def final_state(task, plan: tuple) -> dict[str, Any]:
        return play(task.data["initial_state"], [list(t) for t in plan], strict=False)

    return _cycler(environment, split, final_state=final_state)


CASES = [
    ("ifeval (strict)", lambda: _cycler("ifeval", "test")),
    ("ifeval (loose)", lambda: _cycler("ifeval", "test", {"mode": "loose"})),
    ("state_match (backoffice final states)", lambda: _state_cycler("backoffice", "test")),
]


if __name__ == "__main__":
    import sys

    main(sys.argv[1:], extra=CASES)
