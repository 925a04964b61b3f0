"""A key inside a URL piece rather than at its start: the rule refused a key's prefix only right
after `/ ? # & ; =` and a key-like run only right after `=`, so `?q=Bearer%20sk-proj-…`,
`?q=:sk-proj-…`, `/v1/x.sk-proj-…`, `?q=x-AKIA…` and `?q="sk-…"` were stored with the config and
sent to Prefect; so was `user:pw＠host` (a full-width at sign, which URL parsers read as `@`
after NFKC). Both the config's validator and the Prefect form's pattern refuse them now, and
what is no key stays accepted."""

from __future__ import annotations

from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools import validate
from pydantic import ValidationError

from gymflow.core.config import ModelConfig
from gymflow.flows.eval_run import evaluation_loop

KEY = "sk-proj-Zq8abcdefghij0123456789"
HIDDEN = [
    f"http://host/v1?q=:{KEY}", f"http://host/v1?q=%20{KEY}", f"http://host/v1?q=Bearer%20{KEY}",
    f"http://host/v1?q=Bearer+{KEY}", f"http://host/v1/x.{KEY}", f"http://host/v1?q=%2F{KEY}",
    f"http://host/v1,{KEY}", f'http://host/v1?q="{KEY}"', "http://host/v1?q=(ghp_0123456789abcd)",
    "http://host/v1?q=x-AKIAIOSFODNN7EXAMPLE", "http://host/v1?q=ya29.a0ARrdaM8abcdefghijklmnopq",
    "http://host/v1#x=Bearer%20AIzaSyA1b2C3d4E5f6G7h8", "http://user:pw\uff20host/v1",
    "http://user:pw\ufe6bhost/v1", "http://host\uff0fsk/v1",
]  # fmt: skip
NO_KEY = [
    "http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://[::1]:8000/v1",
    "https://gateway.ai.cloudflare.com/v1/023e105f4ecef8ad9ca31a8372d0c353/my-gw/openai",
    "https://x.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-01-preview",
    "http://host/v1?q=abcdefghijklmnopqrstuvwxyz", "http://host/v1?q=a%20b", "http://host/skills/v1",
    "http://host/desk-1/task-runner/v1", "http://host/v1?model=meta-llama/Llama-3.1-70B-Instruct",
]  # fmt: skip


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return parameter_schema(evaluation_loop).model_dump()


def _accepted(schema: dict[str, Any], url: str) -> tuple[bool, bool]:
    """(the config accepts it, the schema Prefect checks before a flow run accepts it)"""
    try:
        ModelConfig(kind="responses", base_url=url)
        config = True
    except ValidationError:
        config = False
    parameters = {"config": {"benchmark": "arithmetic-smoke", "model": {
        "kind": "responses", "base_url": url}}}  # fmt: skip
    return config, not validate(parameters, schema, ignore_required=True)


@pytest.mark.parametrize("url", HIDDEN)
def test_a_key_inside_a_piece_is_refused_by_config_and_form(schema, url: str) -> None:
    assert _accepted(schema, url) == (False, False)


@pytest.mark.parametrize("url", NO_KEY)
def test_what_is_no_key_stays_accepted(schema, url: str) -> None:
    assert _accepted(schema, url) == (True, True)


def test_the_delimiter_lookalikes_are_every_one_unicode_has() -> None:
    import unicodedata

    from gymflow.core.credentials import _DELIMITER_LOOKALIKES

    every = {
        c
        for c in map(chr, range(0x80, 0x110000))
        if any(d in unicodedata.normalize("NFKC", c) for d in "@/:?#")
    }
    assert set(_DELIMITER_LOOKALIKES) == every
