"""The sandbox interface: where a workspace task's agent and tests run.

At this layer only plain values pass: host paths, sandbox paths as strings, command lines as
text, and an `ExecResult` back. Every sandbox lays out the same file system, as Harbor's tasks
expect it: the task's workspace at /app (the working directory), /logs (the agent's and the
verifier's output, /logs/verifier/reward.txt among it), /tests and /solution (empty until the
verifier or the oracle uploads them), and a private /tmp. What a sandbox cannot honour in a task's
environment (a Dockerfile to build, open internet, more CPUs than the host has) it says before a
run starts (`refusal`), naming the reason, and `gym env validate` reports it per task."""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from gymflow.core.errors import RuntimeFailure
from gymflow.core.trees import BYTECODE_CACHE

#: The task's workspace inside every sandbox, and the working directory of every command.
WORKDIR = "/app"
#: Folders every sandbox has, writable by what runs in it.
FOLDERS = (WORKDIR, "/logs", "/tests", "/solution", "/tmp")


def copy_folder(source: Path, destination: Path) -> None:
    """`source`'s files into `destination` as a sandbox is given them: links as links, and
    without Python's bytecode caches (`gymflow.core.trees.BYTECODE_CACHE`)."""
    shutil.copytree(
        source,
        destination,
        symlinks=True,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(BYTECODE_CACHE),
    )


class SandboxError(RuntimeFailure):
    """The sandbox itself failed (could not start, copy, or run a command): what ran in it is
    unknown, not wrong. A rollout that meets one fails with kind `sandbox_error`."""

    kind = "sandbox_error"


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What a task asks of its sandbox (Harbor's task.toml `[environment]`), and what the host
    must keep from it."""

    #: host folder copied in as /app (a task's environment/ files, its Dockerfile left out)
    workspace: Path
    cpus: int = 1
    memory_mb: int = 2048
    storage_mb: int = 10240
    #: whether the task asks for the internet; no sandbox here grants it beyond the model
    allow_internet: bool = False
    gpus: int = 0
    #: the folder holding environment/Dockerfile, when the task brings one
    dockerfile: Path | None = None
    docker_image: str | None = None
    #: host paths the sandbox must not see (the task's tests and solution: the answer key)
    hidden: tuple[Path, ...] = ()
    #: host folders the agent runs from (its install prefix, a venv), shown read-only at their
    #: own paths; beyond them a sandbox shows the system's programs only
    installs: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class ExecResult:
    """How one command ended. `exit_code` is None when it was stopped (`limit` says why:
    `timeout` or `memory`); `output` is the tail of its stdout and stderr together."""

    exit_code: int | None
    output: str
    seconds: float
    limit: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Sandbox(ABC):
    """One task's sandbox, from `start` to `stop`. Its files live across commands; its processes
    do not (each `exec` is a command of its own, and what it left running ends with it)."""

    #: the name `harness.sandbox` chooses it by
    name: str = ""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec

    @classmethod
    @abstractmethod
    def refusal(cls, spec: SandboxSpec) -> str | None:
        """Why this kind of sandbox cannot honour `spec` (None when it can)."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def expose_model(self, base_url: str) -> str:
        """Let commands reach the model server at `base_url` (an http URL on this host), and
        nothing else; returns the base URL a command inside must use."""

    @abstractmethod
    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run `command` with bash in /app, stopped after `timeout_s` seconds."""

    @abstractmethod
    async def upload(self, source: Path, target: str) -> None:
        """Copy a host file or folder's contents to `target` (a folder inside)."""

    @abstractmethod
    async def download(self, source: str, target: Path) -> list[str]:
        """Copy `source` (a file or folder inside) to the host path `target` by the one rule of
        `sandboxes.taken_out`: folders and regular files within its bounds, never a link.
        Returns what stayed behind, each "path: why"; SandboxError when `source` is no file or
        folder (a link included) or cannot be copied."""

    @abstractmethod
    async def reset(self, inside: str) -> None:
        """Empty a folder inside, as a fresh one (what commands left there is gone)."""

    @abstractmethod
    async def stop(self) -> None:
        """End every process and remove every file; safe to call twice."""

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
