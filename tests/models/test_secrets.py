"""The API key goes to the server and nowhere else, even when the server echoes it back (as
written, JSON-escaped, URL-encoded, in an error or a 200), and a config cannot carry a key where
it would be stored or shown (credentials in a URL, a key given as `api_key_env`)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from aiohttp import web

from gymflow.core.config import EvalConfig, ModelConfig, Sampling, format_validation_error
from gymflow.core.credentials import ENV_VAR_NAME
from gymflow.models.client import REDACTED, ResponsesClient
from gymflow.models.responses import output_text, user_message
from gymflow.verifiers.math_judge import MathJudgeParams
from tests.conftest import gym
from tests.models.conftest import one_call, responses_endpoint

KEY = "sk-test-0123456789abcdef"


async def _echo_the_key(request: web.Request) -> web.Response:
    """Answers like a provider rejecting a key: the key it was sent, in the error message."""
    sent = request.headers["authorization"].removeprefix("Bearer ")
    error = {"message": f"Incorrect API key provided: {sent}.", "code": "invalid_api_key"}
    return web.json_response({"error": error}, status=401)


def test_key_is_sent_but_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMFLOW_SECRET_FOR_TEST", KEY)

    async def call():
        async with responses_endpoint(_echo_the_key) as base_url:
            config = ModelConfig(
                kind="responses", base_url=base_url, api_key_env="GYMFLOW_SECRET_FOR_TEST"
            )
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=None, call_index=0, seed=0)

    outcome = asyncio.run(call())
    (record,) = outcome.calls
    assert record.failure_kind == "client_error" and record.http_status == 401
    stored = json.dumps([record.request, record.response, record.sampling, record.error])
    assert KEY not in stored and KEY not in str(outcome.error)
    assert f"Incorrect API key provided: {REDACTED}" in record.error


# -- credentials in config ---------------------------------------------------------------------
PASSWORD = "hunter2-0123456789abcdef"


@pytest.mark.parametrize(
    "url",
    [
        f"http://user:{PASSWORD}@127.0.0.1:8000/v1",
        f"https://{PASSWORD}@api.example.com/v1",
        f"127.0.0.1:8000@{PASSWORD}/v1",
    ],
)
def test_a_url_with_credentials_is_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        ModelConfig(kind="responses", base_url=url)
    message = format_validation_error(refused.value, "eval.yaml")
    assert "base_url: Value error, a URL must not carry credentials" in message
    assert PASSWORD not in message
    with pytest.raises(ValueError, match=r"resources_url\n.*must not carry credentials"):
        EvalConfig(benchmark="arithmetic-smoke", resources_url=url)


def test_urls_without_credentials_pass_in_python_and_in_the_prefect_form_schema() -> None:
    schema = EvalConfig.model_json_schema()
    # the pattern is the string branch's: null stays allowed beside it
    pattern = schema["$defs"]["ModelConfig"]["properties"]["base_url"]["anyOf"][0]["pattern"]
    assert pattern == schema["properties"]["resources_url"]["anyOf"][0]["pattern"]
    for url in ("http://127.0.0.1:8000/v1", "https://api.openai.com/v1?x=a@b"):
        assert ModelConfig(kind="responses", base_url=url).base_url == url
        assert re.match(pattern, url)
    assert not re.match(pattern, f"http://u:{PASSWORD}@host/v1")


@pytest.mark.parametrize(
    "value",
    [KEY, "hf_AbCdEfGhIjKlMnOpQrStUv", "AIzaSyA1b2C3d4E5f6G7h8", "abcdEFGH1234ijklMNOP5678", "a b"],
)
def test_a_key_given_as_api_key_env_is_refused_without_echoing_it(value: str) -> None:
    with pytest.raises(ValueError) as refused:
        ModelConfig(api_key_env=value)
    message = format_validation_error(refused.value, "eval.yaml")
    assert "must name an environment variable" in message and value not in message
    assert re.match(ENV_VAR_NAME, value) is None or value[:2] in ("hf", "AI", "ab")


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "MY_KEY", "gymflow_key_2", "K"])
def test_variable_names_are_accepted(name: str) -> None:
    assert ModelConfig(api_key_env=name).api_key_env == name


CREDENTIAL_CONFIG = """\
benchmark: arithmetic-smoke
limit: 2
model: {{kind: responses, base_url: "http://user:{password}@127.0.0.1:9/v1"}}
out: {out}
"""


def test_the_cli_refuses_credentials_in_a_url_and_stores_nothing(tmp_path: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text(CREDENTIAL_CONFIG.format(password=PASSWORD, out=tmp_path / "run"))
    checked = gym("env", "validate", str(config), "--ping", cwd=tmp_path)
    assert checked.returncode == 1
    assert "model.base_url: Value error, a URL must not carry credentials" in " ".join(
        (checked.stdout + checked.stderr).split()
    )
    run = gym("eval", "run", str(config), cwd=tmp_path)
    assert run.returncode != 0 and "must not carry credentials" in run.stdout + run.stderr
    for result in (checked, run):
        assert PASSWORD not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()


# -- echoes in answers ---------------------------------------------------------------------------
#: A key with the characters JSON and URLs escape.
ODD_KEY = 'sk-te/st+key"0123456789'


def _json_escaped_every_char(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


ECHOES = {
    "as written": lambda key: key.replace('"', '\\"'),  # escaped only as JSON requires
    "json-escaped": lambda key: json.dumps(key)[1:-1].replace("/", "\\/"),
    "unicode-escaped": _json_escaped_every_char,
    "url-encoded": lambda key: quote(key, safe=""),
    "url-encoded, lower hex": lambda key: quote(key, safe="").lower(),
    "form-encoded": quote_plus,
}


@pytest.mark.parametrize("status", [200, 401])
@pytest.mark.parametrize("echo", ECHOES)
def test_an_echoed_key_is_redacted_before_anything_is_kept(
    echo: str, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYMFLOW_SECRET_FOR_TEST", ODD_KEY)

    async def echo_it(request: web.Request) -> web.Response:
        sent = request.headers["authorization"].removeprefix("Bearer ")
        spelled = ECHOES[echo](sent)
        if status == 401:
            text = '{"error": {"message": "bad key: ' + spelled + '", "code": "invalid_api_key"}}'
        else:
            text = (
                '{"id": "r", "model": "m", "output": [{"type": "message", "role": "assistant", '
                '"content": [{"type": "output_text", "text": "you sent ' + spelled + '"}]}]}'
            )
        return web.Response(text=text, status=status, content_type="application/json")

    outcome = one_call(echo_it)
    (record,) = outcome.calls
    kept = [record.request, record.response, record.sampling, record.error, outcome.response]
    text = json.dumps(kept)
    decoded = json.loads(record.response) if record.response else None
    for form in {spelled(ODD_KEY) for spelled in ECHOES.values()} | {ODD_KEY}:
        assert form not in text and form not in json.dumps(decoded, ensure_ascii=False)
    assert REDACTED in (record.response or "")
    assert (record.failure_kind is None) == (status == 200)


def test_a_printed_validation_error_does_not_repeat_the_secret() -> None:
    """Prefect and tracebacks print a ValidationError whole, input values included by default."""
    with pytest.raises(ValueError) as refused:
        EvalConfig.model_validate(
            {
                "benchmark": "arithmetic-smoke",
                "model": {"kind": "responses", "base_url": f"http://u:{PASSWORD}@h/v1"},
            }
        )
    assert PASSWORD not in str(refused.value)
    with pytest.raises(ValueError) as refused:
        MathJudgeParams(base_url="http://127.0.0.1/v1", api_key_env=KEY)
    assert KEY not in str(refused.value) and "must name an environment variable" in str(
        refused.value
    )


@pytest.mark.parametrize("split", ["two parts", "two messages"])
def test_a_key_split_across_text_parts_is_redacted_in_the_answer_text(
    split: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No byte string of the answer holds the key, but the text the harness joins does."""
    monkeypatch.setenv("GYMFLOW_SECRET_FOR_TEST", KEY)
    head, tail = KEY[:8], KEY[8:]

    def part(text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": []}

    def message(*parts: dict) -> dict:
        return {"type": "message", "role": "assistant", "content": list(parts)}

    output = (
        [message(part("you sent " + head), part(tail + " ok"))]
        if split == "two parts"
        else [message(part("you sent " + head)), message(part(tail + " ok"))]
    )

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"id": "r", "model": "m", "status": "completed", "output": output})

    outcome = one_call(answer)
    (record,) = outcome.calls
    assert outcome.error is None
    answer_text = output_text(outcome.response["output"])
    assert answer_text == f"you sent {REDACTED} ok"
    evidence = output_text(json.loads(record.response)["output"])
    assert evidence == answer_text and KEY not in evidence
