"""`model.tool_choice`: auto, required, none, or not sent (the default). Sent beside the tools on
both server kinds, recorded among the sampling settings a call sent, part of the run's config,
and a closed choice (anything else is a config error naming the field)."""

from __future__ import annotations

import asyncio
import json
import typing
from pathlib import Path
from typing import Any

import duckdb
import pytest
from aiohttp import web
from openai.types.chat import ChatCompletionToolChoiceOptionParam
from openai.types.responses import ToolChoiceOptions

from gymflow.core.config import ModelConfig, Sampling, ToolChoice
from gymflow.models.client import CallOutcome, ResponsesClient
from gymflow.models.responses import user_message
from tests.conftest import gym
from tests.models.conftest import ENVS, responses_endpoint
from tests.models.test_sent_and_received import ANSWERS, PATHS

TOOLS = [{"type": "function", "name": "balance", "parameters": {"type": "object"}}]


def _call(kind: str, tools: list[dict[str, Any]] | None, **model: Any) -> tuple[dict, CallOutcome]:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response(ANSWERS[kind])

    async def go() -> CallOutcome:
        async with responses_endpoint(handler, PATHS[kind]) as base_url:
            config = ModelConfig(kind=kind, base_url=base_url, max_retries=0, **model)
            async with ResponsesClient(config, base_url, Sampling()) as client:
                return await client.create([user_message("hi")], tools=tools, call_index=0, seed=1)

    outcome = asyncio.run(go())
    (body,) = seen
    return body, outcome


def test_the_choices_are_the_ones_both_apis_document_as_text() -> None:
    # the openai SDK's own types: what the Responses API and chat completions accept as text
    chat_text = typing.get_args(typing.get_args(ChatCompletionToolChoiceOptionParam)[0])
    assert set(typing.get_args(ToolChoice)) == set(typing.get_args(ToolChoiceOptions))
    assert set(typing.get_args(ToolChoice)) == set(chat_text)


@pytest.mark.parametrize("kind", ["responses", "chat_completions"])
@pytest.mark.parametrize("choice", ["auto", "required", "none", None])
def test_tool_choice_is_sent_with_the_tools_and_recorded_as_sent(kind: str, choice) -> None:
    body, outcome = _call(kind, TOOLS, tool_choice=choice)
    assert outcome.error is None
    sampling = outcome.calls[0].sampling
    if choice is None:  # not sent: the server's default applies, and the record says so
        assert "tool_choice" not in body and "tool_choice" not in sampling
    else:
        assert body["tool_choice"] == choice and sampling["tool_choice"] == choice
    assert outcome.calls[0].request.get("tool_choice") == choice


@pytest.mark.parametrize("kind", ["responses", "chat_completions"])
def test_no_tool_choice_without_tools(kind: str) -> None:
    # both APIs refuse a tool_choice on a request that offers no tools
    body, outcome = _call(kind, None, tool_choice="required")
    assert "tool_choice" not in body and "tool_choice" not in outcome.calls[0].sampling


def test_an_unknown_tool_choice_is_a_config_error(tmp_path: Path) -> None:
    out = gym("eval", "run", "--benchmark", "backoffice", "--tool-choice", "always", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "--tool-choice" in out.stderr and "'required'" in out.stderr  # the flag it was given
    (tmp_path / "eval.yaml").write_text("benchmark: backoffice\nmodel: {tool_choice: sometimes}\n")
    out = gym("env", "validate", "eval.yaml", cwd=tmp_path)
    assert out.returncode == 1 and "model.tool_choice" in out.stdout + out.stderr


def _stored(run: Path) -> tuple[list[dict], list[dict], dict, list[str]]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        calls = con.execute("SELECT request_json, sampling_json FROM model_calls").fetchall()
        (config,) = con.execute("SELECT config_json FROM runs").fetchone()
        outputs = con.execute("SELECT trajectory_json FROM rollouts").fetchall()
    finally:
        con.close()
    kinds = [item["type"] for (t,) in outputs for item in json.loads(t)]
    return (
        [json.loads(r) for r, _ in calls],
        [json.loads(s) for _, s in calls],
        json.loads(config),
        kinds,
    )


def test_a_run_sends_records_and_the_simulated_server_honours_it(
    tmp_path: Path, prefect_api: str, served_model: str
) -> None:
    env = {"PREFECT_API_URL": prefect_api, "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)}
    common = ("--environment", "ledger", "--limit", "3", "--repeats", "1")
    # chat completions against `gym serve model`, told not to call tools
    out = gym(
        "eval", "run", *common, "--out", "none", "--model-kind", "chat_completions",
        "--model-url", f"{served_model}/v1", "--tool-choice", "none", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode in (0, 2), out.stdout + out.stderr
    requests, sampling, config, kinds = _stored(tmp_path / "none")
    assert requests and all(r["tool_choice"] == "none" for r in requests)
    assert all(s["tool_choice"] == "none" for s in sampling)
    assert config["model"]["tool_choice"] == "none"
    assert "function_call" not in kinds  # the server was told not to, and did not
    # the local policy, tool_choice not set: not sent, recorded as not sent, tools called
    out = gym("eval", "run", *common, "--out", "unset", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    requests, sampling, config, kinds = _stored(tmp_path / "unset")
    assert requests and not any("tool_choice" in r for r in requests)
    assert not any("tool_choice" in s for s in sampling)
    assert config["model"]["tool_choice"] is None
    assert "function_call" in kinds
