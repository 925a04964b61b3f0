"""The harness that docs/components/harness-source.md teaches runs as printed: registered by
name, two model calls, the second answer its output, and a failed call a failure kind."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from typing import Any

import pytest

from gymflow.core.config import HarnessConfig
from gymflow.core.tasks import Task
from gymflow.harness import get_harness
from gymflow.models.client import CallOutcome
from gymflow.models.errors import ModelTimeout
from tests.conftest import ROOT
from tests.harness.test_tool_loop import ScriptedClient, _text

PAGE = ROOT / "docs" / "components" / "harness-source.md"


@pytest.fixture(autouse=True)
def _registry_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example registers `think_then_answer`; other tests list the harnesses there are."""
    from gymflow.harness.base import HARNESSES

    HARNESSES.names()  # the built-ins loaded, so the copy holds them
    monkeypatch.setattr(HARNESSES, "_items", dict(HARNESSES._items))


def _load_the_page_example() -> types.ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 1, f"{PAGE} should hold one Python example, holds {len(blocks)}"
    module = types.ModuleType("harness_page_example")
    sys.modules[module.__name__] = module
    exec(compile(blocks[0], str(PAGE), "exec"), module.__dict__)
    return module


def _run(client: Any) -> Any:
    _load_the_page_example()
    task = Task(task_id="t1", inputs={}, data={}, reference="4", distractor="5")
    return asyncio.run(
        get_harness("think_then_answer")(
            client=client,
            server=None,
            session_id="s",
            task=task,
            prompt="What is 2 + 2?",
            seed=3,
            config=HarnessConfig(),
        )
    )


def test_the_page_example_thinks_then_answers() -> None:
    client = ScriptedClient([[_text("2 and 2 make 4.")], [_text("Answer: 4")]])
    episode = _run(client)
    assert (episode.num_turns, episode.output_text, episode.failure_kind) == (2, "Answer: 4", None)
    nudges = [request[-1]["content"] for request in client.requests]
    assert [request[0]["content"] for request in client.requests] == ["What is 2 + 2?"] * 2
    assert "Think it through first." in str(nudges[0])
    assert "Now give only the answer." in str(nudges[1])
    assert "2 and 2 make 4." in str(client.requests[1])


class FailingClient:
    async def create(self, items, *, tools, call_index, seed) -> CallOutcome:
        return CallOutcome(None, error=ModelTimeout("no answer in 60 s"))


def test_the_page_example_records_a_failed_call_as_its_kind() -> None:
    episode = _run(FailingClient())
    assert (episode.failure_kind, episode.num_turns, episode.output_text) == ("timeout", 1, "")
