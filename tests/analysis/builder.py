"""Constructed run stores for analysis tests, written through the store's own writers.

A `StoreBuilder` holds a run's metadata, its tasks and its rollouts; `rollout()` makes a healthy,
realistic record (one model call whose usage matches, a trajectory, a verification by the real
arithmetic verifier) that a test then bends to fail exactly one thing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gymflow.core.records import ModelCall, Rollout, Verification, rollout_id
from gymflow.core.statuses import COMPLETED, FAILED
from gymflow.environments.registry import load_environment
from gymflow.store.db import connect
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.writer import insert_rows, register_verifier_version, write_rollouts
from gymflow.verifiers.base import VerifyInput

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SAMPLING = {"temperature": 0.7, "top_p": 1.0, "max_output_tokens": 256, "seed": 0}


@dataclass
class RunMeta:
    run_id: str = "run-a"
    benchmark: str = "arithmetic-test"
    benchmark_version: str = "bench-v1"
    environment: str = "arithmetic"
    dataset_version: str = "data-v1"
    model: str = "model-a"
    harness: str = "single_turn"
    prompt_template: str = "{{ question }}"
    sampling: dict[str, Any] = field(default_factory=lambda: dict(SAMPLING))
    repeats: int = 2
    gymflow_version: str = "0.1.0"
    verifier_params: dict[str, Any] = field(default_factory=lambda: {"extract": "answer_line"})
    #: the run's config as stored (`runs.config_json`): what the harness evidence reads
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskRow:
    task_id: str
    answer: int
    tags: tuple[str, ...] = ("expression",)
    difficulty: str | None = "easy"
    #: the prompt as rendered (default `question TASK_ID`)
    prompt: str | None = None


def reseal(con) -> None:
    """Seal a test store's inputs (tasks, runs row, verifier versions, the current version:
    store/sealed_inputs.py) again after the test set a state up by SQL, as the writer that made
    that state would have; an edit left unsealed reads as `inputs_edited`."""
    seal_tasks(con, claim(con, "test store"))


class StoreBuilder:
    def __init__(self, meta: RunMeta | None = None) -> None:
        self.meta = meta or RunMeta()
        self.tasks: dict[str, TaskRow] = {}
        self.rollouts: list[Rollout] = []
        #: SQL run after the records are written, for states the records cannot express (a
        #: rollout whose stored totals disagree with its calls, as an imported file can have)
        self.after_write: list[tuple[str, list[Any]]] = []
        #: written in another folder, then moved where `write` was asked: a store this machine
        #: did not seal at that path (a colleague's, or one an older gymflow wrote)
        self.written_elsewhere = False
        #: the `after_write` SQL sets up a state a writer could have made (a config, a task's
        #: prompt), not an edit: the store's inputs are sealed again after it (`reseal`)
        self.reseal = False
        self.server = load_environment(self.meta.environment).resources_server(
            self.meta.verifier_params
        )

    @property
    def verifier_version(self) -> str:
        return self.server.verifier_version

    def task(self, task_id: str, answer: int, **fields: Any) -> TaskRow:
        row = TaskRow(task_id, answer, **fields)
        self.tasks[task_id] = row
        return row

    def verify(self, task_id: str, text: str) -> Verification:
        from gymflow.core.tasks import Task

        row = self.tasks[task_id]
        task = Task(task_id, {}, {"answer": row.answer}, "", "")
        return self.server.verify_sync(VerifyInput(task, text))

    def rollout(
        self,
        task_id: str,
        repeat: int,
        *,
        correct: bool = True,
        text: str | None = None,
        output_tokens: int = 12,
        input_tokens: int = 30,
        **changes: Any,
    ) -> Rollout:
        """A healthy completed rollout answering right (or `correct=False`: off by one).

        `changes` overrides Rollout fields after the record is built (e.g. `calls=[]`)."""
        answer = self.tasks[task_id].answer
        if text is None:
            text = f"Step by step.\nAnswer: {answer if correct else answer + 1}"
        rid = rollout_id(self.meta.run_id, task_id, repeat)
        request_items = [{"type": "message", "role": "user", "content": f"question {task_id}"}]
        output_items = [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }
        ]
        sampling = {k: v for k, v in self.meta.sampling.items() if k != "seed"} | {"seed": repeat}
        response = {
            "id": f"resp-{rid}",
            "object": "response",
            "model": self.meta.model,
            "status": "completed",
            "output": output_items,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        }
        call = ModelCall(
            call_index=0,
            attempt=0,
            status="completed",
            failure_kind=None,
            http_status=200,
            latency_s=0.25 + 0.01 * repeat,
            request={"model": self.meta.model, "input": request_items, **sampling},
            response=response,
            sampling=sampling,
            input_tokens=input_tokens,
            cached_tokens=0,
            output_tokens=output_tokens,
            reasoning_tokens=0,
        )
        started = T0 + timedelta(seconds=len(self.rollouts))
        record = Rollout(
            rollout_id=rid,
            run_id=self.meta.run_id,
            task_id=task_id,
            repeat_index=repeat,
            seed=repeat,
            status=COMPLETED,
            started_at=started,
            finished_at=started + timedelta(seconds=0.3),
            trajectory=[*request_items, *output_items],
            calls=[call],
            output_text=text,
            num_turns=1,
            verification=self.verify(task_id, text),
        )
        for name, value in changes.items():
            setattr(record, name, value)
        self.rollouts.append(record)
        return record

    def fill(self, task_id: str, outcomes: str) -> list[Rollout]:
        """One rollout per character: '1' passes, '0' fails (wrong answer), 'x' failed (timed
        out, unverified), '-' is left missing."""
        made = []
        for repeat, mark in enumerate(outcomes):
            if mark == "-":
                continue
            record = self.rollout(task_id, repeat, correct=mark == "1")
            if mark == "x":
                record.status, record.failure_kind, record.verification = FAILED, "timeout", None
            made.append(record)
        return made

    def write(self, run_dir: Path) -> Path:
        written = (
            run_dir.with_name(run_dir.name + "-elsewhere") if self.written_elsewhere else run_dir
        )
        con = connect(written, create=True)
        try:
            self._write(con)
            for sql, params in self.after_write:
                con.execute(sql, params)
            if self.reseal:
                reseal(con)
        finally:
            con.close()
        if written != run_dir:
            written.rename(run_dir)
        return run_dir

    def _write(self, con) -> None:
        m = self.meta
        insert_rows(
            con,
            "runs",
            [
                (
                    m.run_id,
                    T0.replace(tzinfo=None),
                    m.gymflow_version,
                    json.dumps(m.config),
                    m.run_id,
                    m.benchmark,
                    m.benchmark_version,
                    m.environment,
                    m.dataset_version,
                    "test",
                    m.model,
                    m.harness,
                    m.prompt_template,
                    json.dumps(m.sampling),
                    m.repeats,
                    1,
                    self.verifier_version,
                )
            ],
        )
        insert_rows(
            con,
            "tasks",
            [
                (
                    m.run_id,
                    t.task_id,
                    i,
                    0,
                    t.prompt or f"question {t.task_id}",
                    f"Answer: {t.answer}",
                    json.dumps({"answer": t.answer}),
                    list(t.tags),
                    t.difficulty,
                )
                for i, t in enumerate(self.tasks.values())
            ],
        )
        register_verifier_version(
            con,
            self.verifier_version,
            self.server.verifier.name,
            self.server.params.model_dump(mode="json"),
        )
        write_rollouts(con, self.rollouts)
