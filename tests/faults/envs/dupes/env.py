"""Bad-input fixture: the fourth row of the dataset repeats the second row's task id."""

from __future__ import annotations

from gymflow.core.tasks import Task
from gymflow.environments.base import Environment


class Dupes(Environment):
    def generate(self, split):
        ids = ["d-0", "d-1", "d-2", "d-1"]
        return [
            Task(
                task_id=task_id,
                inputs={"question": f"{i} + 1"},
                data={"answer": i + 1},
                reference=f"Answer: {i + 1}",
                distractor=f"Answer: {i}",
            )
            for i, task_id in enumerate(ids)
        ]
