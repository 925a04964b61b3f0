"""Harnesses turn a model into an agent. A harness is a small registered component chosen by name
in the config; it runs one rollout and reports exactly what happened."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gymflow.core.config import HarnessConfig
from gymflow.core.protocols import Resources
from gymflow.core.records import ModelCall
from gymflow.core.registry import Registry
from gymflow.core.tasks import Task
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import system_message, user_message


@dataclass(slots=True)
class Episode:
    """What a harness hands back: the trajectory and the evidence, or the failure that ended it."""

    trajectory: list[dict[str, Any]]
    calls: list[ModelCall] = field(default_factory=list)
    output_text: str = ""
    failure_kind: str | None = None
    error: str | None = None
    incomplete: bool = False
    num_turns: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    #: tool calls whose server failed and whose answer went back to the model (ToolServerError):
    #: each its route, status and answer, the first with the server's log; the rollout's `error`
    tool_failures: list[str] = field(default_factory=list)
    #: what the harness left out of the record and why (a log an external agent left as a link,
    #: a device or past the bound, never read on the host): the rollout's `error` too
    left_out: list[str] = field(default_factory=list)


class Harness(Protocol):
    async def __call__(
        self,
        *,
        client: ResponsesClient,
        server: Resources,
        session_id: str,
        task: Task,
        prompt: str,
        seed: int | None,
        config: HarnessConfig,
    ) -> Episode: ...


#: Installed packages register their harnesses under this entry-point group (name = harness).
ENTRY_POINT_GROUP = "gymflow.harnesses"

#: Every harness by name: the built-ins, an installed package's `gymflow.harnesses` entry point,
#: or a user's own as `module:function` (importable).
HARNESSES: Registry[Harness] = Registry(
    "harness",
    builtins=lambda: importlib.import_module("gymflow.harness"),
    entry_point_group=ENTRY_POINT_GROUP,
    import_paths=True,
    check=callable,
)


def harness(name: str, *, for_data: bool = False) -> Callable[[Harness], Harness]:
    """Register a harness function under `name`; `for_data`: a benchmark found only on the data
    path may choose it (it sends a row's prompt to the run's model and runs nothing a row
    names; `Registry.register`)."""

    def register(fn: Harness) -> Harness:
        return HARNESSES.register(name, fn, for_data=for_data)

    return register


def get_harness(name: str) -> Harness:
    """A harness by name (see HARNESSES). Raises UnknownName, or RegistryError for an import
    path or entry point that does not load."""
    return HARNESSES.get(name)


def opening_items(prompt: str, config: HarnessConfig, task: Task) -> list[dict[str, Any]]:
    """The system prompt, if any, then the task's own input items, or else its rendered prompt."""
    items = [system_message(config.system_prompt)] if config.system_prompt else []
    items.extend(task.input_items or [user_message(prompt)])
    return items
