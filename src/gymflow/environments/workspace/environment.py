"""The environment a workspace benchmark defines: a folder of Harbor tasks (`workspace:` in the
benchmark YAML, relative to it), one task per folder, each judged by its own test script.

```yaml
name: workspace-basics
description: ...
workspace: ../workspace        # the folder holding the task folders
tags: [workspace]
```

Its one split is every task in the folder; the dataset version is a hash of every task's
version (a hash of its files), so any edit to any task is a new benchmark version."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymflow.core.tasks import Task, ToolCall
from gymflow.environments.base import Environment, EnvironmentManifest, SplitSpec, VerifierRef
from gymflow.environments.workspace.harbor_task import (
    TaskProblem,
    WorkspaceTask,
    read_task,
    task_folders,
)
from gymflow.sandboxes.choice import sandbox_kind

if TYPE_CHECKING:
    from gymflow.environments.registry import Benchmark
    from gymflow.environments.workspace.resources import WorkspaceResources

FOLDER = Path(__file__).parent
SPLIT = "tasks"
#: The prompt: the task's instruction.md, as it is.
TEMPLATE = "{{ instruction }}"


def workspace_manifest(benchmark: Benchmark, tasks_root: Path) -> EnvironmentManifest:
    """The environment's manifest; its tags are the benchmark's and every task's own
    (`[metadata] tags`), so `gym search git` finds a benchmark with a git task."""
    return EnvironmentManifest(
        name=benchmark.environment,
        description=benchmark.description or f"the Harbor tasks of {tasks_root}",
        domain="workspace",
        tags=list(dict.fromkeys([*benchmark.tags, "workspace", "harbor", *_task_tags(tasks_root)])),
        verifier=VerifierRef(name="workspace_tests"),
        reward_range=(0.0, 1.0),
        pass_threshold=1.0,
        reverify_stateless=False,
        harness="command",
        prompt_template=TEMPLATE,
        splits={SPLIT: SplitSpec(description=f"every task folder in {tasks_root}")},
        default_split=SPLIT,
        id_field="(task folder name)",
        entrypoint="env:WorkspaceEnvironment",
    )


def _task_tags(root: Path) -> list[str]:
    tags: list[str] = []
    for folder in task_folders(root):
        try:
            metadata = tomllib.loads((folder / "task.toml").read_text()).get("metadata", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue  # reported by `gym env validate`
        found = metadata.get("tags") if isinstance(metadata, dict) else None
        tags += [str(tag) for tag in found] if isinstance(found, list) else []
    return tags


def tasks_root(benchmark: Benchmark, benchmark_file: Path) -> Path:
    """`workspace:`, relative to the benchmark YAML, inside the folder holding its benchmarks/
    (as a dataset benchmark's file is: a benchmark someone wrote must not point at /etc)."""
    assert benchmark.workspace is not None
    root = benchmark_file.parent.parent.resolve()
    path = (benchmark_file.parent / benchmark.workspace).resolve()
    if not path.is_relative_to(root):
        raise ValueError(
            f"workspace: {benchmark.workspace!r} is outside {root} (a benchmark reads only "
            "folders under the folder that holds its benchmarks/)"
        )
    if not path.is_dir():
        raise ValueError(f"workspace: {path} is not a folder")
    return path


class WorkspaceEnvironment(Environment):
    def __init__(
        self, manifest: EnvironmentManifest, folder: Path, *, root: Path | None = None
    ) -> None:
        super().__init__(manifest, folder)
        self.root = root
        self._read: dict[str, WorkspaceTask] | None = None
        self._problems: list[str] = []

    @classmethod
    def from_benchmark(cls, benchmark: Benchmark, benchmark_file: Path) -> WorkspaceEnvironment:
        root = tasks_root(benchmark, benchmark_file)
        return cls(workspace_manifest(benchmark, root), FOLDER, root=root)

    # -- the tasks -------------------------------------------------------------------------------
    def _load(self) -> dict[str, WorkspaceTask]:
        if self._read is None:
            if self.root is None:
                raise ValueError(f"environment {self.name!r}: no task folder")
            read, problems = {}, []
            for folder in task_folders(self.root):
                try:
                    read[folder.name] = read_task(folder)
                except TaskProblem as exc:
                    problems.append(str(exc))
            if not read and not problems:
                problems.append(f"{self.root}: no task folders (each holds a task.toml)")
            self._read, self._problems = read, problems
        return self._read

    def task_problems(self, sandbox: str = "bubblewrap") -> list[str]:
        """Every task that is not a valid Harbor task, or whose environment `sandbox` cannot
        honour, each naming the task and the reason."""
        tasks = self._load()
        problems = list(self._problems)
        kind = sandbox_kind(sandbox)
        for name, task in tasks.items():
            reason = kind.refusal(task.sandbox_spec(task.environment_dir))
            if reason:
                problems.append(f"task {name!r}: the {sandbox} sandbox cannot run it: {reason}")
        return problems

    def workspace_task(self, task_id: str) -> WorkspaceTask:
        return self._load()[task_id]

    def generate(self, split: str) -> list[Task]:
        tasks = self._load()
        if self._problems:
            raise TaskProblem("\n".join(self._problems))
        return [_as_task(task) for task in tasks.values()]

    def dataset_version(self, split: str) -> str:
        digest = hashlib.sha256()
        for name, task in sorted(self._load().items()):
            digest.update(f"{name}\0{task.version}\0".encode())
        return digest.hexdigest()[:12]

    def hidden_paths(self) -> tuple[Path, ...]:
        """What no sandbox may see: the task folders (tests and solutions among them), and the
        git work tree holding them, whose history holds them too."""
        if self.root is None:
            return ()
        checkout = next((p for p in self.root.parents if (p / ".git").exists()), None)
        return (self.root, checkout) if checkout is not None else (self.root,)

    def resources_server(self, verifier_params: dict[str, Any] | None = None) -> WorkspaceResources:
        from gymflow.environments.workspace.resources import WorkspaceResources

        return WorkspaceResources(self, verifier_params)


#: What gymflow's simulated policy does on a workspace task it gets wrong: look, change nothing.
DISTRACTOR_COMMAND = "ls -la"


def _as_task(task: WorkspaceTask) -> Task:
    """The task as gymflow passes it around. Its reference plan (for the simulated policy only,
    which plays the tool loop's `shell` tool) is the task's solve.sh as one command; its
    distractor plan looks around and changes nothing."""
    metadata = task.config.metadata
    tags = metadata.get("tags") if isinstance(metadata.get("tags"), list) else []
    difficulty = metadata.get("difficulty")
    solve = task.solution_dir / "solve.sh"
    plan: tuple[tuple[ToolCall, ...], ...] = ()
    if solve.is_file():
        plan = ((ToolCall("shell", {"command": solve.read_text()}),),)
    return Task(
        task_id=task.name,
        inputs={"instruction": task.instruction},
        data=task.summary(),
        reference="I ran the solution in /app.",
        distractor="I looked at /app and changed nothing.",
        reference_actions=plan,
        distractor_actions=((ToolCall("shell", {"command": DISTRACTOR_COMMAND}),),),
        tags=tuple(str(tag) for tag in tags),
        difficulty=str(difficulty) if difficulty is not None else None,
    )
