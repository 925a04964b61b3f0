"""A workspace task in Harbor's format: one folder, readable by anyone.

    task-name/
      task.toml          [verifier] timeout_sec, env; [agent] timeout_sec;
                         [environment] cpus, memory_mb, storage_mb, allow_internet, gpus,
                         docker_image; [metadata] difficulty, category, tags
      instruction.md     what the agent is told
      environment/       the workspace (copied to /app); a Dockerfile here builds a container
      tests/test.sh      run after the agent, in the same sandbox; writes the reward to
                         /logs/verifier/reward.txt (a number) or reward.json (numbers by name)
      solution/solve.sh  the reference solution the `oracle` agent runs

The fields and their defaults are Harbor's (harbor.models.task.config), so a Terminal-Bench or
Harbor task folder reads as it does there; a key Harbor has and gymflow does not act on is kept,
not refused. A task's version is a hash of every file in its folder: any edit is a new version."""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymflow.core.config import format_validation_error
from gymflow.core.errors import UserError
from gymflow.core.trees import in_bytecode_cache
from gymflow.sandboxes.base import SandboxSpec

#: Largest reward file read: a number, or a small JSON object of numbers.
MAX_REWARD_BYTES = 64 << 10


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class VerifierSection(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)


class AgentSection(_Section):
    timeout_sec: float | None = Field(None, gt=0)


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    cpus: int = Field(1, ge=1)
    memory_mb: int = Field(2048, ge=16)
    storage_mb: int = Field(10240, ge=1)
    gpus: int = Field(0, ge=0)
    allow_internet: bool = True
    network_mode: str | None = None


class TaskToml(_Section):
    """task.toml, as Harbor reads it (`version` is its schema version)."""

    version: str | None = None
    schema_version: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierSection = VerifierSection()
    agent: AgentSection = AgentSection()
    environment: EnvironmentSection = EnvironmentSection()

    @property
    def allow_internet(self) -> bool:
        if self.environment.network_mode is not None:
            return self.environment.network_mode != "no-network"
        return self.environment.allow_internet


#: The agent's time limit when task.toml sets none (Harbor's agents bring their own default).
DEFAULT_AGENT_TIMEOUT_S = 600.0


class TaskProblem(UserError, ValueError):
    """A task folder that is not a valid Harbor task; the message names the task and the file."""


@dataclass(frozen=True)
class WorkspaceTask:
    name: str
    folder: Path
    config: TaskToml
    instruction: str

    @property
    def environment_dir(self) -> Path:
        return self.folder / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.folder / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.folder / "solution"

    @property
    def dockerfile(self) -> Path | None:
        return self.environment_dir if (self.environment_dir / "Dockerfile").is_file() else None

    @property
    def agent_timeout_s(self) -> float:
        return self.config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S

    @cached_property
    def version(self) -> str:
        return folder_hash(self.folder)

    def sandbox_spec(
        self, workspace: Path, hidden: tuple[Path, ...] = (), installs: tuple[Path, ...] = ()
    ) -> SandboxSpec:
        env = self.config.environment
        return SandboxSpec(
            workspace=workspace,
            cpus=env.cpus,
            memory_mb=env.memory_mb,
            storage_mb=env.storage_mb,
            allow_internet=self.config.allow_internet,
            gpus=env.gpus,
            dockerfile=self.dockerfile,
            docker_image=env.docker_image,
            hidden=hidden,
            installs=installs,
        )

    def summary(self) -> dict[str, Any]:
        """What a run stores of the task (never a host path: the same task on another machine
        is the same row)."""
        env = self.config.environment
        return {
            "task": self.name,
            "version": self.version,
            "agent_timeout_s": self.agent_timeout_s,
            "verifier_timeout_s": self.config.verifier.timeout_sec,
            "cpus": env.cpus,
            "memory_mb": env.memory_mb,
            "storage_mb": env.storage_mb,
            "allow_internet": self.config.allow_internet,
            "dockerfile": self.dockerfile is not None,
            "has_solution": (self.solution_dir / "solve.sh").is_file(),
        }


def folder_hash(folder: Path) -> str:
    """A hash of every file's relative path, mode bit for execution and bytes (links by
    target), in path order; Python's bytecode caches are not the task's files."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        below = path.relative_to(folder)
        if in_bytecode_cache(below):
            continue
        relative = below.as_posix()
        if path.is_symlink():
            digest.update(f"L{relative}\0{path.readlink()}\0".encode())
        elif path.is_file():
            executable = path.stat().st_mode & 0o111 != 0
            digest.update(f"F{relative}\0{int(executable)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:12]


def read_task(folder: Path) -> WorkspaceTask:
    """The task in `folder`; raises TaskProblem listing every problem, each naming the task."""
    problems = []
    name = folder.name
    config = TaskToml()
    toml_path = folder / "task.toml"
    try:
        config = TaskToml.model_validate(tomllib.loads(toml_path.read_text()))
    except FileNotFoundError:
        problems.append(f"task {name!r}: {toml_path}: missing")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        problems.append(f"task {name!r}: {toml_path}: not valid TOML: {exc}")
    except ValidationError as exc:
        problems.append(f"task {name!r}: {format_validation_error(exc, str(toml_path))}")
    instruction = ""
    try:
        instruction = (folder / "instruction.md").read_text()
        if not instruction.strip():
            problems.append(f"task {name!r}: {folder / 'instruction.md'}: empty")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"task {name!r}: {folder / 'instruction.md'}: cannot read: {exc}")
    if not (folder / "tests" / "test.sh").is_file():
        problems.append(f"task {name!r}: {folder / 'tests' / 'test.sh'}: missing (the verifier)")
    if not (folder / "environment").is_dir():
        problems.append(f"task {name!r}: {folder / 'environment'}: missing (the workspace)")
    for path in folder.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
            problems.append(f"task {name!r}: {path}: a link out of the task's folder")
    if problems:
        raise TaskProblem("\n".join(problems))
    return WorkspaceTask(name, folder, config, instruction)


def task_folders(root: Path) -> list[Path]:
    """The task folders under `root`: each folder holding a task.toml, in name order."""
    return sorted(path.parent for path in root.glob("*/task.toml"))


# -- the reward ----------------------------------------------------------------------------------
class RewardProblem(ValueError):
    """What the test script wrote is no reward (missing, not a number, not finite)."""


def parse_reward(text: bytes | None, json_text: bytes | None) -> tuple[float, dict[str, float]]:
    """The reward, as Harbor reads /logs/verifier: reward.txt holds one number; else
    reward.json holds an object of numbers, whose `reward` (or only) entry is the reward and
    whose others are kept as details."""
    if text is not None:
        value = _number(text.decode(errors="replace").strip(), "reward.txt")
        return value, {}
    if json_text is None:
        raise RewardProblem("the test script wrote neither reward.txt nor reward.json")
    try:
        data = json.loads(json_text)
    except (ValueError, RecursionError) as exc:
        raise RewardProblem(f"reward.json is not JSON: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise RewardProblem("reward.json is not an object of numbers")
    values = {str(key): _number(value, f"reward.json[{key!r}]") for key, value in data.items()}
    if "reward" in values:
        return values.pop("reward"), values
    if len(values) == 1:
        return next(iter(values.values())), {}
    raise RewardProblem(f"reward.json has several numbers ({', '.join(values)}) and no 'reward'")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise RewardProblem(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RewardProblem(f"{where}: {str(value)[:80]!r} is not a number") from None
    if not math.isfinite(number):
        raise RewardProblem(f"{where}: {value!r} is not a finite number")
    return number
