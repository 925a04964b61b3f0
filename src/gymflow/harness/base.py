"""Harnesses turn a model into an agent. A harness is a small registered component chosen by name
in the config; it runs one rollout and reports exactly what happened."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol

from gymflow.config import HarnessConfig
from gymflow.core.protocols import Resources
from gymflow.core.records import ModelCall
from gymflow.core.tasks import Task
from gymflow.models.client import ResponsesClient


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


HARNESSES: dict[str, Harness] = {}


def harness(name: str) -> Callable[[Harness], Harness]:
    def register(fn: Harness) -> Harness:
        HARNESSES[name] = fn
        return fn

    return register


#: Installed packages register their harnesses under this entry-point group (name = harness).
ENTRY_POINT_GROUP = "gymflow.harnesses"


def get_harness(name: str) -> Harness:
    """A harness by registered name, by `module:function` (a user's own, importable), or from an
    installed package's `gymflow.harnesses` entry point."""
    import gymflow.harness  # noqa: F401  (registers the built-in harnesses)

    if name in HARNESSES:
        return HARNESSES[name]
    if ":" in name:
        return _import_harness(name)
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=name):
        HARNESSES[name] = entry.load()
        return HARNESSES[name]
    known = ", ".join(sorted(HARNESSES))
    raise KeyError(
        f"unknown harness {name!r} (known: {known}; or give module:function of your own)"
    )


def _import_harness(path: str) -> Harness:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise KeyError(f"harness {path!r}: cannot import {module_name!r}: {exc}") from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise KeyError(f"harness {path!r}: {module_name!r} has no callable {attribute!r}")
    HARNESSES[path] = fn
    return fn


def opening_items(prompt: str, config: HarnessConfig, task: Task) -> list[dict[str, Any]]:
    """The system prompt, if any, then the task's own input items, or else its rendered prompt."""
    from gymflow.models.responses import system_message, user_message

    items = [system_message(config.system_prompt)] if config.system_prompt else []
    items.extend(task.input_items or [user_message(prompt)])
    return items
