"""A run plan: the config resolved against the registry into tasks, prompts and rollout keys."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from gymflow.core.config import ConfigError, EvalConfig, Sampling
from gymflow.core.errors import UserError
from gymflow.core.prompts import PromptError, PromptTimeout, render_prompt
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment, UnknownSplit
from gymflow.environments.registry import (
    Benchmark,
    RegistryError,
    benchmark_files,
    environment_sources,
    load_benchmark,
    load_environment,
)
from gymflow.verifiers.base import get_verifier

RolloutKey = tuple[str, int]  # (task_id, repeat_index)
#: The field a verifier-parameter problem is reported under.
VERIFIER_PROBLEM = "verifier_params"


def shard_of(task_id: str, count: int) -> int:
    """Stable across runs and machines, so a shard's work never depends on other shards."""
    digest = hashlib.blake2b(task_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True)
class RunPlan:
    config: EvalConfig
    env: Environment
    benchmark: Benchmark | None
    split: str
    template: str
    repeats: int
    sampling: Sampling
    verifier_params: dict[str, Any]
    harness: str
    all_tasks: tuple[Task, ...]
    #: The config's fingerprint, taken once: every row of the run carries it.
    run_id: str
    #: Every task's prompt, rendered once when the plan is built (`render_all`).
    prompts: dict[str, str]
    #: The rows whose prompt did not render, by what went wrong (`plan_problems` reports them).
    prompt_failures: dict[str, list[tuple[int, str]]]

    @property
    def run_dir(self) -> Path:
        return Path(self.config.out)

    @cached_property
    def tasks(self) -> tuple[Task, ...]:
        """This shard's tasks."""
        count = self.config.shard.count
        if count == 1:
            return self.all_tasks
        return tuple(
            t for t in self.all_tasks if shard_of(t.task_id, count) == self.config.shard.index
        )

    @cached_property
    def task_by_id(self) -> dict[str, Task]:
        return {task.task_id: task for task in self.all_tasks}

    def keys(self) -> list[RolloutKey]:
        return [(task.task_id, r) for task in self.tasks for r in range(self.repeats)]

    def for_shard(self, config: EvalConfig) -> RunPlan:
        """This run's plan for `config`, one of its shards (same run, another `shard` and
        `out`), without resolving or rendering anything again."""
        return replace(self, config=config)

    @cached_property
    def verifier_version(self) -> str:
        spec = get_verifier(self.env.manifest.verifier.name)
        params = spec.params({**self.env.manifest.verifier.params, **self.verifier_params})
        return spec.version(params)

    @cached_property
    def dataset_version(self) -> str:
        return self.env.dataset_version(self.split)

    @property
    def benchmark_version(self) -> str:
        if self.benchmark is not None:
            rows = self.dataset_version if self.benchmark.dataset is not None else None
            if self.env.rows_are_protocol:  # the server judging them too: another server's
                # verdicts read as another dataset's in a comparison, as they should
                served = f"{rows}|{self.verifier_version}".encode()
                rows = hashlib.sha256(served).hexdigest()[:12]
            return self.benchmark.version(rows)
        protocol = (
            f"{self.env.name}|{self.split}|{self.template}|{self.repeats}|"
            f"{self.sampling.model_dump_json()}|{self.config.limit}"
        )
        if self.env.rows_are_protocol:  # another file's rows, or another server, is another run
            protocol += f"|{self.dataset_version}|{self.verifier_version}"
        return hashlib.sha256(protocol.encode()).hexdigest()[:12]


def resolve(config: EvalConfig) -> RunPlan:
    """Resolve and check everything a run needs before any rollout starts."""
    plan = build_plan(config)
    check_plan(plan)
    return plan


#: Plans resolved ahead of their flow run in this process (`handed_down`), by config.
_handed: dict[str, RunPlan] = {}
_handed_lock = threading.Lock()


@contextmanager
def handed_down(plan: RunPlan) -> Iterator[None]:
    """While inside, `plan_of` this plan's config is this plan. A flow's parameters cross
    Prefect's API as JSON (the UI's form, a work pool's shard), so a flow takes a config, not a
    plan; a caller in the same process that has resolved the plan already (`gym eval run`
    before its flow run, a shard task before its subflow) hands it down here instead of having
    it resolved, its benchmark and environment loaded and its prompts rendered again."""
    key = plan.config.model_dump_json()
    with _handed_lock:
        _handed[key] = plan
    try:
        yield
    finally:
        with _handed_lock:
            _handed.pop(key, None)


def plan_of(config: EvalConfig) -> RunPlan:
    """The plan handed down for `config` (`handed_down`), else `resolve(config)`: a run from
    the UI or a schedule, or a shard on a work pool, resolves its own."""
    with _handed_lock:
        plan = _handed.get(config.model_dump_json())
    return plan if plan is not None else resolve(config)


def build_plan(config: EvalConfig) -> RunPlan:
    """Resolve names against the registry; a name that does not resolve is a ConfigError."""
    try:
        benchmark = load_benchmark(config.benchmark) if config.benchmark else None
        env = load_environment(config.environment or benchmark.environment)
    except RegistryError as exc:
        raise ConfigError(str(exc)) from None
    if benchmark and config.environment and config.environment != benchmark.environment:
        raise ConfigError(
            f"environment: {config.environment!r} differs from benchmark {benchmark.name!r}'s "
            f"environment {benchmark.environment!r}"
        )
    split = (benchmark.split if benchmark else None) or env.manifest.default_split
    try:
        tasks = env.tasks(split)
    except UserError as exc:  # no such split, a repeated task id, a dataset's bad rows
        problem = str(exc)
        if isinstance(exc, UnknownSplit) and benchmark and benchmark.split:
            problem = f"{benchmark_files()[config.benchmark]}: split: {problem}"
        raise ConfigError(problem) from None
    limit = config.limit or (benchmark.limit if benchmark else None)
    if limit:
        tasks = tasks[:limit]
    repeats = config.repeats or (benchmark.repeats if benchmark else 1)
    sampling = config.sampling or (benchmark.sampling if benchmark else Sampling())
    template = (
        config.prompt_template
        or (benchmark.prompt_template if benchmark else None)
        or env.manifest.prompt_template
    )
    verifier_params = {**(benchmark.verifier_params if benchmark else {}), **config.verifier_params}
    prompts, prompt_failures = render_all(template, tasks)
    return RunPlan(
        config=config,
        env=env,
        benchmark=benchmark,
        split=split,
        template=template,
        repeats=repeats,
        sampling=sampling,
        verifier_params=verifier_params,
        harness=config.harness.name or env.manifest.harness,
        all_tasks=tuple(tasks),
        run_id=config.fingerprint(),
        prompts=prompts,
        prompt_failures=prompt_failures,
    )


def render_all(
    template: str, tasks: list[Task]
) -> tuple[dict[str, str], dict[str, list[tuple[int, str]]]]:
    """Every task's prompt, and the rows that failed, by message. A template that outlives its
    time bound on one row is not tried on the others: each would cost the bound again."""
    prompts: dict[str, str] = {}
    failing: dict[str, list[tuple[int, str]]] = {}
    for row, task in enumerate(tasks):
        try:
            rendered = render_prompt(template, task.inputs)
        except PromptTimeout as exc:
            left = len(tasks) - row - 1
            message = f"{exc}; the {left} rows after it were not rendered" if left else str(exc)
            failing.setdefault(message, []).append((row, task.task_id))
            break
        except PromptError as exc:
            failing.setdefault(str(exc), []).append((row, task.task_id))
        else:
            if not rendered.strip():  # an empty CSV cell: the model would be asked nothing
                failing.setdefault("renders empty (an empty field?)", []).append(
                    (row, task.task_id)
                )
            prompts[task.task_id] = rendered
    return prompts, failing


def check_plan(plan: RunPlan) -> None:
    """Every task renders through the template, and the verifier accepts its parameters."""
    problems = plan_problems(plan)
    if problems:
        raise ConfigError("\n".join(problems))


def template_source(plan: RunPlan, config_source: str = "the eval config") -> str:
    """The file and field the plan's prompt template was written in."""
    if plan.config.prompt_template:
        return f"{config_source} (prompt_template)"
    if plan.benchmark is not None and plan.benchmark.prompt_template:
        return f"{benchmark_files()[plan.benchmark.name]} (prompt_template)"
    if plan.benchmark is not None and plan.benchmark.dataset is not None:  # nemo_gym rows
        return f"{benchmark_files()[plan.benchmark.name]} (the rows' own first user message)"
    return f"{environment_sources()[plan.env.name].folder / 'environment.yaml'} (prompt_template)"


def plan_problems(
    plan: RunPlan, *, rows_shown: int = 5, config_source: str = "the eval config"
) -> list[str]:
    """Every problem with a plan, not just the first. Rows failing the same way are one problem
    (naming the first few rows and the count), so a bad template gives one line, not thousands;
    it names the file and field the template came from."""
    problems = []
    for message, rows in plan.prompt_failures.items():
        shown = ", ".join(f"row {row} ({task_id})" for row, task_id in rows[:rows_shown])
        more = f" and {len(rows) - rows_shown} more rows" if len(rows) > rows_shown else ""
        problems.append(
            f"{plan.env.name}/{plan.split} {shown}{more}: prompt: {message} "
            f"(template from {template_source(plan, config_source)})"
        )
    try:
        _ = plan.verifier_version
    except UserError as exc:  # bad parameters, or a verifier nobody registered
        problems.append(f"{VERIFIER_PROBLEM}: {exc}")
    return problems
