"""Secrets in spellings the first hardening missed: a key in a URL's query (Google's `?key=`,
`?api_key=`, `#access_token=`) and an upper-case key id given as `api_key_env` were stored in
`runs.config_json` and shown in the report."""

from __future__ import annotations

import pytest

from gymflow.config import ModelConfig, format_validation_error

SECRET = "SEKRIT0123456789abcdef"


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:8000/v1?api_key={SECRET}",
        f"https://generativelanguage.example.com/v1?key={SECRET}",
        f"http://127.0.0.1:8000/v1?api-version=1&access_token={SECRET}",
        f"http://127.0.0.1:8000/v1#token={SECRET}",
    ],
)
def test_a_key_in_a_url_query_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        ModelConfig(kind="responses", base_url=url)
    message = format_validation_error(refused.value, "eval.yaml")
    assert "must not carry credentials" in message and SECRET not in message


def test_a_query_without_credentials_is_kept() -> None:
    url = "https://x.example.com/openai/v1?api-version=2025-04-01-preview"
    assert ModelConfig(kind="responses", base_url=url).base_url == url


@pytest.mark.parametrize(
    "value", ["AKIAIOSFODNN7EXAMPLE", "github_pat_11ABCDEFG0abcdefXYZ1234567890"]
)
def test_an_upper_case_or_underscored_key_as_api_key_env_is_refused(value: str) -> None:
    with pytest.raises(ValueError) as refused:
        ModelConfig(api_key_env=value)
    message = format_validation_error(refused.value, "eval.yaml")
    assert "must name an environment variable" in message and value not in message
