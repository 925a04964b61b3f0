"""The tasks a stored run is judged again against: the benchmark's, never the store's copy.

A task's data is what its verifier reads, and for some verifiers it is code: HumanEval's tests
run in the verifier's trusted process (`verifiers/code_exec.py`). Rebuilt from the store's
`tasks.data_json`, a test edited in the file ran on the host during `gym eval reverify RUN
--check` (a command that writes nothing) and wrote the seal key out (issue 42). So reverify and
its check take each task from the run's benchmark (its stored config resolved to its plan), or,
for an import matched to an environment, from that environment's splits, and compare the stored
copy with it: a copy that differs (data, reference answer) is an integrity failure, and nothing
is judged. (Moves into the `reverify/` package with the house move.)"""

from __future__ import annotations

import json
from pathlib import Path

from gymflow.core.errors import GateFailed
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment
from gymflow.store.queries.tasks import stored_tasks
from gymflow.store.runs import RunInfo


class TaskCopyEdited(GateFailed):
    """The store's copy of a task differs from the benchmark's (or names a task it lacks): an
    integrity failure (exit 2), as a seal that does not match is."""


def _benchmark_tasks(run: RunInfo, env: Environment) -> dict[str, Task]:
    """The run's tasks as its benchmark gives them now, by id."""
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts.merge import expected_plan

    try:
        EvalConfig.model_validate_json(run.config_json or "")
    except ValueError:
        # an import: its tasks are the environment's, matched by id across its splits
        tasks: dict[str, Task] = {}
        for split in env.manifest.splits:
            for task in env.tasks(split):
                tasks.setdefault(task.task_id, task)
        return tasks
    return dict(expected_plan(run).task_by_id)


def _stored_form(data) -> object:
    """A task's data as the store holds it, parsed back (`json.dumps(default=str)` on write)."""
    return json.loads(json.dumps(data, default=str))


def trusted_tasks(
    con, store: Path, run: RunInfo, env: Environment, *, task_code: bool
) -> dict[str, Task]:
    """Every task the store holds, taken from the benchmark, after checking the store's copy of
    each against it (TaskCopyEdited, in one line naming the store, task and field). A task the
    benchmark does not have (a synthetic store, an import of another dataset) is judged from
    the store's copy, whose contents the inputs seal covers (`store/sealed_inputs.py`), unless
    the verifier loads code from it (`task_code`): then it is refused, nothing judged."""
    source = _benchmark_tasks(run, env)
    rows = stored_tasks(con)
    tasks = {}
    for task_id, data_json, reference, tags, difficulty in rows:
        stored = _parsed(store, task_id, data_json)
        task = source.get(task_id)
        if task is None:
            if task_code:
                raise TaskCopyEdited(
                    f"{store}: task {task_id!r} is not a task of {env.name!r} as this machine "
                    "has it, and its verifier runs the task's tests: they are taken from the "
                    "benchmark only, never from the store; nothing judged"
                )
            tasks[task_id] = Task(
                task_id=task_id,
                inputs={},
                data=stored,
                reference=reference or "",
                distractor="",
                tags=tuple(tags or ()),
                difficulty=difficulty,
            )
            continue
        if stored != _stored_form(task.data):
            raise _edited(store, task_id, "data_json")
        if (reference or "") != (task.reference or ""):
            raise _edited(store, task_id, "reference")
        tasks[task_id] = task
    return tasks


def _parsed(store: Path, task_id: str, data_json: str | None) -> dict:
    """A stored task's data, parsed; not a JSON object is TaskCopyEdited naming the field."""
    try:
        stored = json.loads(data_json) if data_json else {}
    except ValueError:
        raise _edited(store, task_id, "data_json") from None
    if not isinstance(stored, dict):
        raise _edited(store, task_id, "data_json")
    return stored


def _edited(store: Path, task_id: str, field: str) -> TaskCopyEdited:
    return TaskCopyEdited(
        f"{store}: task {task_id!r}: the stored {field} differs from the benchmark's "
        "(edited in the store, or the benchmark changed since the run): an integrity failure; "
        "nothing judged, nothing run from the store"
    )
