"""The environment a dataset benchmark defines: its rows as tasks, a built-in verifier, no Python.

Its manifest is made from the benchmark YAML (name, description, tags, verifier, prompt
template); its one split is the file's (or the Hub split's) rows. A verifier worker process
rebuilds it from that manifest through `env.py` beside this module, without the rows: a worker
only verifies, and a verification carries its task."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.core.registry import RegistryError
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment, EnvironmentManifest, SplitSpec, UnknownSplit
from gymflow.environments.benchmark import Benchmark
from gymflow.environments.dataset.hub import hub_rows
from gymflow.environments.dataset.mapping import RowRules, map_rows
from gymflow.environments.dataset.readers import DatasetError, read_rows
from gymflow.environments.dataset.simulate import SOURCES
from gymflow.environments.dataset.spec import DatasetSpec
from gymflow.environments.resources import ResourcesServer
from gymflow.verifiers.base import get_verifier

FOLDER = Path(__file__).parent
#: The template of NeMo Gym rows, which bring their own request: the first user message's text.
NEMO_GYM_TEMPLATE = "{{ prompt }}"


@dataclass(frozen=True, slots=True)
class Loaded:
    source: str  # the file, or hub:name@commit
    commit: str | None  # the Hub commit the rows came from
    tasks: list[Task]
    digests: list[bytes]
    wheres: list[str]
    problems: list[str]


def dataset_manifest(benchmark: Benchmark) -> EnvironmentManifest:
    """The manifest of a dataset benchmark's environment. Raises ValueError naming the key."""
    spec, ref = benchmark.dataset, benchmark.verifier
    assert spec is not None and ref is not None  # the Benchmark model requires both together
    try:
        verifier = get_verifier(ref.name)
    except RegistryError as exc:
        raise ValueError(f"verifier.name: {str(exc).strip(chr(34))}") from None
    template = benchmark.prompt_template or (NEMO_GYM_TEMPLATE if spec.format == "nemo_gym" else "")
    if not template:
        raise ValueError(
            "prompt_template: a dataset benchmark needs one (only nemo_gym rows bring their own)"
        )
    where = spec.path or f"hub:{spec.hub.name}"  # type: ignore[union-attr]
    return EnvironmentManifest(
        name=benchmark.environment,
        description=benchmark.description or f"the rows of {where}",
        domain=spec.domain,
        tags=[*benchmark.tags, "dataset"],
        verifier=ref,
        reward_range=verifier.reward_range,
        pass_threshold=(
            spec.pass_threshold if spec.pass_threshold is not None else verifier.pass_threshold
        ),
        harness=spec.harness,
        prompt_template=template,
        splits={spec.split_name: SplitSpec(description=f"the rows of {where}")},
        default_split=spec.split_name,
        id_field=spec.fields.id or "(content hash)",
        entrypoint="env:DatasetEnvironment",
    )


def local_path(spec: DatasetSpec, benchmark_file: Path | None) -> Path:
    """`dataset.path`, relative to the benchmark YAML and inside the folder that holds its
    `benchmarks/` (the folder a user put on the search path or downloaded): a benchmark
    someone else wrote must not read ~/.ssh or /etc into a run's store. Symlinks are
    followed before the check, so a link inside the folder cannot point out of it."""
    assert spec.path is not None
    if benchmark_file is None:
        return Path.cwd() / spec.path
    root = benchmark_file.parent.parent.resolve()
    path = (benchmark_file.parent / spec.path).resolve()
    if not path.is_relative_to(root):
        raise DatasetError(
            [
                f"{benchmark_file}: dataset.path: {spec.path!r} is outside {root} "
                "(a benchmark reads only files under the folder that holds its benchmarks/)"
            ]
        )
    return path


class DatasetResources(ResourcesServer):
    """No tools of its own: each task offers the tools its row brings, which are never executed
    (the verifier reads the calls from the trajectory)."""

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        return list(task.tools)


class DatasetEnvironment(Environment):
    def __init__(
        self,
        manifest: EnvironmentManifest,
        folder: Path,
        *,
        spec: DatasetSpec | None = None,
        benchmark_file: Path | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(manifest, folder)
        self.spec = spec
        self.benchmark_file = benchmark_file
        self.limit = limit
        self._loaded: dict[str, Loaded] = {}

    @classmethod
    def from_benchmark(cls, benchmark: Benchmark, benchmark_file: Path) -> DatasetEnvironment:
        return cls(
            dataset_manifest(benchmark),
            FOLDER,
            spec=benchmark.dataset,
            benchmark_file=benchmark_file,
            limit=benchmark.limit,
        )

    def resources_server(self, verifier_params: dict[str, Any] | None = None) -> ResourcesServer:
        return DatasetResources(self, verifier_params)

    # -- rows ----------------------------------------------------------------------------------
    def rules(self) -> RowRules:
        assert self.spec is not None
        ref = self.manifest.verifier
        return RowRules(
            fields=self.spec.fields,
            nemo_gym=self.spec.format == "nemo_gym",
            id_prefix=self.name,
            verifier=ref.name,
            verifier_params=ref.params,
            verifier_fields=get_verifier(ref.name).fields,
        )

    def load(self, split: str | None = None) -> Loaded:
        """Read and map every row once, keeping every problem (for `gym env validate`)."""
        split = split or self.manifest.default_split
        if split in self._loaded:
            return self._loaded[split]
        if self.spec is None:
            raise DatasetError([f"environment {self.name!r} was built without its dataset"])
        if split != self.spec.split_name:
            raise UnknownSplit(
                f"environment {self.name!r} has no split {split!r} (splits: {self.spec.split_name})"
            )
        if self.spec.hub is not None:
            hub = hub_rows(self.spec.hub, self.limit)
            source, commit, rows = hub.label, hub.commit, hub.rows
        else:
            path = self._local_path()
            source, commit = str(path), None
            rows = read_rows(path, self.spec.format or "jsonl", self.limit)
        rules = self.rules()
        mapped = map_rows(rows, rules)
        problems = [
            *self._unmapped(rules),
            *mapped.problems(source),
            *_repeated_ids(source, mapped.tasks, mapped.wheres),
        ]
        if not mapped.tasks and not problems:
            problems = [f"{source}: holds no rows"]
        loaded = Loaded(source, commit, mapped.tasks, mapped.digests, mapped.wheres, problems)
        self._loaded[split] = loaded
        return loaded

    def _local_path(self) -> Path:
        assert self.spec is not None
        return local_path(self.spec, self.benchmark_file)

    def _unmapped(self, rules: RowRules) -> list[str]:
        """Fields the verifier needs that an explicit mapping leaves out (a default mapping
        names them all, and a row without one is a row problem)."""
        return [
            f"{self.benchmark_file}: dataset.fields.verifier: {rules.verifier} reads {name!r} "
            f"({field.kind}), which is not mapped"
            for name, field in rules.verifier_fields.items()
            if field.required and name not in rules.verifier_map
        ]

    def generate(self, split: str) -> list[Task]:
        loaded = self.load(split)
        if loaded.problems:
            raise DatasetError(loaded.problems)
        return loaded.tasks

    def dataset_version(self, split: str) -> str:
        """A hash of every row used, as read (not just the mapped fields), and the Hub commit:
        any change to the file, or a moved revision, is a new version."""
        loaded = self.load(split)
        digest = hashlib.sha256((loaded.commit or "").encode())
        for row_digest in loaded.digests:
            digest.update(row_digest)
        return digest.hexdigest()[:12]

    def simulation(self, split: str | None = None) -> str:
        """What the local simulated policy can answer on these tasks, said plainly."""
        tasks = self.load(split).tasks
        answered = sum(1 for t in tasks if t.reference or t.reference_actions)
        ref = self.manifest.verifier.name
        mapped = self.spec.fields.reference if self.spec else None
        source = f"the mapped reference field {mapped!r}" if mapped else SOURCES.get(ref)
        if answered == len(tasks):
            return f"the local simulated policy answers all {len(tasks)} tasks from {source}"
        why = (
            f"{ref} gives it no answer to write"
            if source is None
            else f"{len(tasks) - answered} rows lack it"
        )
        return (
            f"the local simulated policy can answer {answered} of {len(tasks)} tasks ({why}; map "
            "dataset.fields.reference to a passing response); on the others it replies that it "
            "cannot, and those rollouts fail verification: use a real model for this dataset"
        )


def _repeated_ids(source: str, tasks: list[Task], wheres: list[str]) -> list[str]:
    """A task id given by two rows, named by the file's own lines (or Parquet rows), as every
    other row problem is: "line 7: task_id 'a' repeats line 3"."""
    first: dict[str, str] = {}
    problems = []
    for task, where in zip(tasks, wheres, strict=True):
        if task.task_id in first:
            problems.append(
                f"{source}: {where}: task_id {task.task_id!r} repeats {first[task.task_id]}"
            )
        else:
            first[task.task_id] = where
    return problems
