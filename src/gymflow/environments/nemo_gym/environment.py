"""A NeMo Gym resources server and its datasets as a gymflow environment.

Tasks are the dataset's rows as NeMo Gym writes them (`responses_create_params` with `input`,
optional `instructions` and `tools`, and the verifier's own fields), read and checked by the
dataset rows' mapping (`gymflow.environments.dataset.mapping`, which names file, line and
field): each task opens with the row's input items, offers the row's tools as given, and carries
the whole row as its data, so `/verify` gets the row's fields as NeMo Gym's agents send them.
Ids are content hashes of the row.

The local simulated policy plays what NeMo Gym's own rollout collection recorded for the same
request beside the dataset (`data/<split>_rollouts.jsonl`): a passing rollout's tool calls and
final text as its reference, a failing one's as its distractor."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from gymflow.core.config import ConfigError
from gymflow.core.tasks import Task, ToolCall
from gymflow.environments.base import Environment, EnvironmentManifest
from gymflow.environments.benchmark import Benchmark
from gymflow.environments.dataset.environment import local_path
from gymflow.environments.dataset.mapping import FieldProblem, RowRules, map_rows
from gymflow.environments.dataset.readers import DatasetError, read_rows
from gymflow.environments.dataset.spec import FieldMap
from gymflow.environments.nemo_gym.folder import PATH_VARIABLE, NemoServer, nemo_servers
from gymflow.environments.nemo_gym.launch import nemo_python
from gymflow.models.responses import output_text

Plan = tuple[tuple[ToolCall, ...], ...]


class NemoGymEnvironment(Environment):
    rows_are_protocol = True

    def __init__(self, server: NemoServer, manifest: EnvironmentManifest | None = None) -> None:
        super().__init__(manifest or server.manifest(), server.folder)
        self.server = server
        self._digests: dict[str, list[bytes]] = {}

    @classmethod
    def from_benchmark(cls, benchmark: Benchmark, benchmark_file: Path) -> NemoGymEnvironment:
        """A dataset benchmark's own rows on a NeMo Gym environment's server:
        `dataset: {path: rows.jsonl, format: nemo_gym}` with
        `verifier: {name: nemo_gym, params: {server: ng-NAME}}`. Raises ValueError naming the
        key."""
        assert benchmark.dataset is not None and benchmark.verifier is not None
        spec, named = benchmark.dataset, benchmark.verifier.params.get("server")
        servers = nemo_servers()
        if named not in servers:
            known = ", ".join(sorted(servers)) or f"none: set {PATH_VARIABLE}"
            raise ValueError(
                f"verifier.params.server: {named!r} is no NeMo Gym environment (known: {known})"
            )
        if spec.hub is not None or spec.format != "nemo_gym":
            raise ValueError("dataset: a NeMo Gym server's rows are a local nemo_gym file")
        server = replace(servers[named], splits={spec.split_name: local_path(spec, benchmark_file)})
        base = server.manifest()
        manifest = base.model_copy(
            update={
                "name": benchmark.name,
                "description": benchmark.description or base.description,
                "tags": [*benchmark.tags, *base.tags, "dataset"],
                "harness": spec.harness if "harness" in spec.model_fields_set else base.harness,
            }
        )
        return cls(server, manifest)

    def rules(self) -> RowRules:
        return RowRules(
            fields=FieldMap(),
            nemo_gym=True,
            id_prefix=self.name,
            verifier="nemo_gym",
            verifier_params=self.manifest.verifier.params,
            verifier_fields={},
            carry_row=True,
        )

    def generate(self, split: str) -> list[Task]:
        path = self.server.splits[split]
        mapped = map_rows(read_rows(path, "nemo_gym"), self.rules())
        problems = mapped.problems(str(path))
        if not mapped.tasks and not problems:
            problems = [f"{path}: holds no rows"]
        if problems:
            raise DatasetError(problems)
        self._digests[split] = mapped.digests
        played = recorded_plays(path.with_name(f"{path.stem}_rollouts.jsonl"))
        tasks = [_with_play(task, played.get(_request_key(task.data))) for task in mapped.tasks]
        return distinct_ids(tasks)

    def dataset_version(self, split: str) -> str:
        """A hash of every row as read (the whole row, not just what a task keeps)."""
        self.tasks(split)
        digest = hashlib.sha256()
        for row_digest in self._digests[split]:
            digest.update(row_digest)
        return digest.hexdigest()[:12]

    def resources_server(self, verifier_params: dict[str, Any] | None = None):
        from gymflow.environments.nemo_gym.resources import NemoGymResources

        return NemoGymResources(self, verifier_params)

    def refusals(self, verifier_params: dict[str, Any]) -> list[str]:
        """Why this server cannot be started for a run, before anything starts: no NeMo Gym
        interpreter to start it with, a judge server without `verifier_params.judge`, a
        requirement that is no registry package."""
        from gymflow.environments.nemo_gym.prepare import PrepareError, requirements

        problems = []
        try:
            nemo_python()
        except ConfigError as exc:
            problems.append(str(exc))
        if self.server.asks_judge and not verifier_params.get("judge"):
            names = _judge_names(self.server.fields) or "the policy model"
            problems.append(
                f"NeMo Gym server {self.server.name} asks a judge model (its config names "
                f"{names}), and none is set: set verifier_params.judge (base_url, model) in the "
                "eval config; gymflow never answers for a judge"
            )
        try:
            requirements(self.server)
        except PrepareError as exc:
            problems.append(str(exc))
        return problems

    def simulation(self, split: str | None = None) -> str:
        tasks = self.tasks(split)
        played = sum(1 for t in tasks if t.reference or t.reference_actions)
        return (
            f"the local simulated policy replays NeMo Gym's recorded rollouts on {played} of "
            f"{len(tasks)} tasks (data/<split>_rollouts.jsonl); on the others it replies that it "
            "cannot: use a real model for this environment"
        )


def _judge_names(fields: dict[str, Any]) -> str:
    """The model servers a config block names (`judge_model_server: {name: ...}`)."""
    return ", ".join(
        f"{key}: {value.get('name')}"
        for key, value in fields.items()
        if isinstance(value, dict) and value.get("type") == "responses_api_models"
    )


def distinct_ids(tasks: list[Task]) -> list[Task]:
    """NeMo Gym runs a row given twice twice (its datasets repeat rows on purpose, e.g. one
    blackjack deal per game); ids are content hashes, so the n-th copy of a row (n >= 2) gets
    its hash's id with `~n`: the same file gives the same ids, and a copy is a task of its own."""
    seen: dict[str, int] = {}
    distinct = []
    for task in tasks:
        copies = seen[task.task_id] = seen.get(task.task_id, 0) + 1
        distinct.append(task if copies == 1 else replace(task, task_id=f"{task.task_id}~{copies}"))
    return distinct


def _request_key(row: dict[str, Any]) -> bytes:
    """A request's instructions and each input message's role and content parts (text, and the
    image or file each part carries): NeMo Gym writes its rollouts' requests with its models'
    defaults filled in (`type`, `detail`, null settings), so the dataset's row and the recorded
    request differ as JSON. The parts beyond text count: two rows may ask the same words of
    different images (circle_count: "How many yellow circles are in the image?")."""
    params = row.get("responses_create_params") or {}
    items = params.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    messages = [
        (item.get("role"), _content_parts(item.get("content")))
        for item in items or ()
        if isinstance(item, dict) and item.get("type", "message") == "message"
    ]
    return hashlib.sha256(orjson.dumps([params.get("instructions"), messages])).digest()


#: The keys of a content part that hold what it says or shows, in the Responses API and chat
#: completions (`image_url` is a URL there, `{"url": ...}` here).
_PART_VALUES = ("text", "image_url", "file_data", "file_id", "file_url", "input_audio")


def _content_parts(content: object) -> list[object]:
    if isinstance(content, str):
        return [content]
    parts: list[object] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict):
            value = next((part[key] for key in _PART_VALUES if part.get(key)), None)
            parts.append(value.get("url", value) if isinstance(value, dict) else value)
    return parts


def _plan(output: list[dict[str, Any]]) -> Plan:
    """The function calls of a recorded response, one tuple per turn: a turn's calls come
    before the outputs answering them."""
    turns: list[tuple[ToolCall, ...]] = []
    current: list[ToolCall] = []
    for item in output:
        if item.get("type") == "function_call":
            try:
                arguments = orjson.loads(item.get("arguments") or "{}")
            except orjson.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                raise FieldProblem("a recorded call's arguments are no JSON object")
            current.append(ToolCall(str(item.get("name")), arguments))
        elif item.get("type") == "function_call_output" and current:
            turns.append(tuple(current))
            current = []
    if current:
        turns.append(tuple(current))
    return tuple(turns)


def recorded_plays(path: Path) -> dict[bytes, dict[str, tuple[str, Plan]]]:
    """request key -> {"pass" | "fail": (final text, plan)} from a NeMo Gym rollouts file; a
    file absent or a line unreadable just leaves those tasks unsimulated."""
    plays: dict[bytes, dict[str, tuple[str, Plan]]] = {}
    if not path.is_file():
        return plays
    for line in path.read_bytes().splitlines():
        try:
            row = orjson.loads(line)
            reward, output = row["reward"], row["response"]["output"]
            play = (output_text(output), _plan(output))
        except (orjson.JSONDecodeError, KeyError, TypeError, FieldProblem):
            continue
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            plays.setdefault(_request_key(row), {}).setdefault(
                "pass" if reward >= 1.0 else "fail", play
            )
    return plays


def _with_play(task: Task, play: dict[str, tuple[str, Plan]] | None) -> Task:
    if not play:
        return task
    reference, reference_actions = play.get("pass", ("", ()))
    distractor, distractor_actions = play.get("fail", ("", ()))
    return replace(
        task,
        reference=reference,
        reference_actions=reference_actions,
        distractor=distractor,
        distractor_actions=distractor_actions,
    )
