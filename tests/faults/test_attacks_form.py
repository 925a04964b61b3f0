"""The Prefect form accepted what the config refuses: an `api_key_env` that is a key, and a
`base_url` with `user:password@`, made flow runs whose parameters showed them in plain text.
The form's fields now are the config's own types (gymflow.config.ServerUrl, ApiKeyEnv): one
validator, and a JSON Schema pattern built from the same words, which the Prefect server checks
before it creates a flow run. Here: for every value, the schema Prefect enforces refuses exactly
what the config refuses, and the form as submitted to the flow refuses it too."""

from __future__ import annotations

from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools import validate
from pydantic import TypeAdapter, ValidationError

from gymflow.config import ModelConfig
from gymflow.flows.eval_run import evaluation_loop
from gymflow.flows.parameters import FlowConfig

KEY_NAMES = [
    "OPENAI_API_KEY", "MY_KEY", "gymflow_key_2", "K", "_PRIVATE", "SK", "HF_HOME_TOKEN_VAR",
    "sk-test-0123456789abcdef", "sk_live_abc", "hf_AbCdEfGhIjKlMnOpQrStUv", "HF_abc",
    "AIzaSyA1b2C3d4E5f6G7h8", "abcdEFGH1234ijklMNOP5678", "AKIAIOSFODNN7EXAMPLE",
    "__abcdEFGH1234ijklMNOP5678__", "ghp_0123456789", "github_pat_11AAA", "gsk_x", "a b", "1ABC",
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJ1234567890_X",
]  # fmt: skip
URLS = [
    "http://127.0.0.1:8000/v1", "https://api.example.com/v1", "127.0.0.1:8000",
    "http://host/v1?api-version=2024", "http://host/v1?model=x&region=eu",
    "http://user:pw@host/v1", "http://user@host/v1", "http://host/v1?key=abc",
    "http://host/v1?api_key=abc", "http://host/v1?X-Token=abc", "http://host/v1#access_token=abc",
    "http://host/v1?a=1&Signature=abc", "http://host/v1?%6Bey=abc", "http://host/v1?q=bypass",
]  # fmt: skip


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return parameter_schema(evaluation_loop).model_dump()


def _config_accepts(**model: str) -> bool:
    try:
        ModelConfig(kind="responses", **{"base_url": "http://127.0.0.1:1/v1", **model})
    except ValidationError:
        return False
    return True


def _schema_accepts(schema: dict[str, Any], **model: str) -> bool:
    """As the Prefect server checks a flow run's parameters before it creates the run."""
    model = {"kind": "responses", "base_url": "http://127.0.0.1:1/v1", **model}
    parameters = {"config": {"benchmark": "arithmetic-smoke", "model": model}}
    return not validate(parameters, schema, ignore_required=True)


@pytest.mark.parametrize("name", KEY_NAMES)
def test_the_form_refuses_a_key_as_api_key_env_as_the_config_does(schema, name: str) -> None:
    accepted = _config_accepts(api_key_env=name)
    assert _schema_accepts(schema, api_key_env=name) == accepted
    assert _form_accepts(api_key_env=name) == accepted


@pytest.mark.parametrize("url", URLS)
def test_the_form_refuses_credentials_in_a_url_as_the_config_does(schema, url: str) -> None:
    accepted = _config_accepts(base_url=url)
    if url == "http://host/v1?%6Bey=abc":  # the pattern cannot read an escape: it refuses one
        assert (accepted, _schema_accepts(schema, base_url=url)) == (False, False)
    elif "%" not in url:
        assert _schema_accepts(schema, base_url=url) == accepted
    assert _form_accepts(base_url=url) == accepted


def test_the_corpus_holds_both_verdicts() -> None:
    assert {_config_accepts(api_key_env=name) for name in KEY_NAMES} == {True, False}
    assert {_config_accepts(base_url=url) for url in URLS} == {True, False}


def _form_accepts(**model: str) -> bool:
    """What the flow makes of the submitted form (a run started past the schema)."""
    model = {"kind": "responses", "base_url": "http://127.0.0.1:1/v1", **model}
    try:
        TypeAdapter(FlowConfig).validate_python({"benchmark": "arithmetic-smoke", "model": model})
    except ValidationError:
        return False
    return True
