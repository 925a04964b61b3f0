"""Harnesses by name: built-ins, a user's own `module:function`, and clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gymflow.core.registry import RegistryError
from gymflow.harness import get_harness
from gymflow.harness.single_turn import single_turn
from gymflow.harness.tool_loop import tool_loop

MINE = """
from gymflow.harness.base import Episode


async def echo(*, client, server, session_id, task, prompt, seed, config):
    return Episode(trajectory=[], output_text=prompt)
"""


def test_builtins() -> None:
    assert get_harness("single_turn") is single_turn
    assert get_harness("tool_loop") is tool_loop


def test_a_users_own_harness_by_module_and_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_harnesses.py").write_text(MINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        fn = get_harness("my_harnesses:echo")
        assert fn.__name__ == "echo" and get_harness("my_harnesses:echo") is fn
        with pytest.raises(RegistryError, match="'my_harnesses' has no 'nope'"):
            get_harness("my_harnesses:nope")
    finally:
        sys.modules.pop("my_harnesses", None)


def test_unknown_names_say_what_exists() -> None:
    with pytest.raises(RegistryError, match=r"unknown harness 'loop'.*single_turn, tool_loop"):
        get_harness("loop")
    with pytest.raises(RegistryError, match="cannot import 'no_such_module_x'"):
        get_harness("no_such_module_x:run")
