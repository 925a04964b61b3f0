"""The Prefect form accepted what the config refuses: an `api_key_env` that is a key, and a
`base_url` with `user:password@`, made flow runs whose parameters showed them in plain text. The
form's fields now are the config's own types (gymflow.core.credentials.ServerUrl, ApiKeyEnv):
one validator, and a JSON Schema pattern built from the same words, which the Prefect server
checks before it creates a flow run. Here: for every value, the schema Prefect enforces refuses
exactly what the config refuses, and the form as submitted to the flow refuses it too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools import validate
from pydantic import TypeAdapter, ValidationError

from gymflow.core.config import EvalConfig, ModelConfig
from gymflow.flows.eval_run import evaluation_loop
from gymflow.flows.lean import REFUSED
from gymflow.flows.parameters import FlowConfig, ScaleOptions
from tests.faults.stores import gym_env

KEY_NAMES = [
    "OPENAI_API_KEY", "MY_KEY", "gymflow_key_2", "K", "_PRIVATE", "SK", "HF_HOME_TOKEN_VAR",
    "sk-test-0123456789abcdef", "sk_live_abc", "hf_AbCdEfGhIjKlMnOpQrStUv", "HF_abc",
    "AIzaSyA1b2C3d4E5f6G7h8", "abcdEFGH1234ijklMNOP5678", "AKIAIOSFODNN7EXAMPLE",
    "__abcdEFGH1234ijklMNOP5678__", "ghp_0123456789", "github_pat_11AAA", "gsk_x", "a b", "1ABC",
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJ1234567890_X",
    # gymflow's own secret, sent as the bearer to a config's server, and names around it
    "GYMFLOW_SEAL_KEY", "gymflow_seal_key", "GYMFLOW_SEAL_KEY_2", "MY_GYMFLOW_SEAL_KEY",
]  # fmt: skip
URLS = [
    "http://127.0.0.1:8000/v1", "https://api.example.com/v1", "127.0.0.1:8000",
    "http://host/v1?api-version=2024", "http://host/v1?model=x&region=eu",
    "http://user:pw@host/v1", "http://user@host/v1", "http://host/v1?key=abc",
    "http://host/v1?api_key=abc", "http://host/v1?X-Token=abc", "http://host/v1#access_token=abc",
    "http://host/v1?a=1&Signature=abc", "http://host/v1?%6Bey=abc", "http://host/v1?q=bypass",
    # a key as a query value, a path segment, a `;` parameter, escaped, or as the host's name
    "http://host/v1?q=sk-proj-AbC123", "http://host/sk-proj-AbC123/v1", "http://host/v1;sk-abc",
    "http://host/v1;key=abc", "http://host/v1;x=AIzaSyA1b2C3d4", "http://host/v1#x=hf_abcdef",
    "http://host/v1?q=AKIAIOSFODNN7EXAMPLE", "http://host/v1?q=eyJhbGciOiJIUzI1NiIsInR5cCI6",
    "http://host/%73k-proj-AbC123/v1", "http://host/v1?q=sk%2Dproj", "http://sk-abc.host/v1",
    "http://host/v1/ghp_0123456789abcdef", "http://host/v1?q=a&r=Gsk_abc",
    # and what is no key: ids in gateway paths, dates, words, an escaped space
    "https://gateway.ai.cloudflare.com/v1/023e105f4ecef8ad9ca31a8372d0c353/my-gw/openai",
    "https://x.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-01-preview",
    "http://host/v1?q=abcdefghijklmnopqrstuvwxyz", "http://host/v1?q=a%20b", "http://host/skills/v1",
    "http://host/v1;jsessionid", "http://127.0.0.1:8000/v1/",
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


@pytest.mark.parametrize("name", KEY_NAMES)
def test_the_form_refuses_a_key_as_resources_key_env_as_the_config_does(schema, name) -> None:
    """A served environment's access key is named as a model's API key is: never the key."""
    try:
        EvalConfig(benchmark="arithmetic-smoke", resources_key_env=name)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == _config_accepts(api_key_env=name)
    parameters = {"config": {"benchmark": "arithmetic-smoke", "resources_key_env": name}}
    assert (not validate(parameters, schema, ignore_required=True)) == accepted


@pytest.mark.parametrize("url", URLS)
def test_the_form_refuses_credentials_in_a_url_as_the_config_does(schema, url: str) -> None:
    accepted = _config_accepts(base_url=url)
    assert _schema_accepts(schema, base_url=url) == accepted
    assert _form_accepts(base_url=url) == accepted


SHARD_ROOTS = {
    "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENG@bucket/runs": False,
    "https://user:pw@storage.example/runs": False,
    "s3://bucket/runs": True,
    "file:///srv/shards": True,
    "/srv/shards": True,
    "runs/latest/shards": True,
    "/srv/a@b/shards": True,
    "runs/sk-learn": True,  # a folder named like a key's prefix is a folder
    "s3://bucket/sk-proj-AbC123": False,
}


def _accepted(build) -> bool:
    try:
        build()
    except ValidationError as exc:
        assert "AKIA" not in str(exc) and "user:pw" not in str(exc)  # refused, never echoed
        return False
    return True


@pytest.mark.parametrize("root", sorted(SHARD_ROOTS))
def test_the_form_refuses_credentials_in_the_shard_root_and_out(schema, root: str) -> None:
    """The shard root and `out` were any string: a URL holding `key:secret@` made a flow run
    whose parameters showed it in plain text, and the CLI took it too (attacker's pass, issue
    28). A folder passes whatever it is named."""
    for parameters in (
        {"config": {"benchmark": "arithmetic-smoke"}, "scale": {"shard_root": root}},
        {"config": {"benchmark": "arithmetic-smoke", "out": root}},
    ):
        assert (not validate(parameters, schema, ignore_required=True)) == SHARD_ROOTS[root]
    assert _accepted(lambda: ScaleOptions(shard_root=root)) == SHARD_ROOTS[root]
    config = lambda: EvalConfig(benchmark="arithmetic-smoke", out=root)  # noqa: E731
    assert _accepted(config) == SHARD_ROOTS[root]


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


SECRET = "sk-proj-Zq8SECRETvalue0123"
#: A flow run started past the schema (a Python caller, a deployment with the schema not
#: enforced) with a key in its URL, and one with a key as api_key_env.
_STARTED_PAST_THE_SCHEMA = f"""
import sys
from gymflow.flows.eval_run import evaluation_loop
for model in ({{"base_url": "http://127.0.0.1:1/v1?q={SECRET}"}}, {{"api_key_env": "{SECRET}"}}):
    try:
        evaluation_loop(config={{"benchmark": "arithmetic-smoke", "out": sys.argv[1],
                                 "model": {{"kind": "responses", **model}}}})
    except Exception as exc:
        print("refused:", type(exc).__name__, exc)
"""


def test_a_value_refused_past_the_schema_is_not_echoed_in_prefect_or_the_terminal(
    prefect_api: str, tmp_path: Path
) -> None:
    """Prefect logged a failed parameter validation with each error's input and the whole
    parameters dict: the key in a URL was in the flow run's logs on the server and on the
    terminal. Now the log line says the values are not repeated; the run's error still names
    the field and why; the flow run's parameters hold a placeholder for the refused one; and
    nothing is stored where the run would write."""
    out = tmp_path / "run"
    started = datetime.now(UTC).isoformat()
    done = subprocess.run(
        [sys.executable, "-c", _STARTED_PAST_THE_SCHEMA, str(out)],
        env={**os.environ, **gym_env(prefect_api), "PREFECT_LOGGING_LEVEL": "INFO"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    terminal = done.stdout + done.stderr
    assert terminal.count("refused: ParameterTypeError") == 2, terminal
    assert "config.model.base_url" in terminal and "config.model.api_key_env" in terminal
    assert "the values given are not repeated" in terminal
    assert SECRET not in terminal
    runs = httpx.post(
        f"{prefect_api}/flow_runs/filter", json={"flow_runs": {"name": {"like_": ""}}}, timeout=30
    ).json()
    ours = [r for r in runs if r["created"] >= started and r["parameters"].get("config") == REFUSED]
    assert len(ours) == 2, [r["parameters"] for r in runs]
    for run in ours:
        assert run["state"]["type"] == "FAILED" and "base_url" in json.dumps(ours)
        logs = httpx.post(
            f"{prefect_api}/logs/filter",
            json={"logs": {"flow_run_id": {"any_": [run["id"]]}}},
            timeout=30,
        ).json()
        assert SECRET not in json.dumps(logs)
        assert SECRET not in json.dumps(run)
    assert not out.exists()


#: Every deployment in prefect.yaml, called past its schema with one parameter its type refuses
#: (a value holding SECRET): the flow run must store the placeholder, never the value.
_EVERY_DEPLOYED_FLOW = f"""
import importlib, inspect, json, sys, typing
import yaml
from pydantic import TypeAdapter, ValidationError

SECRET = {SECRET!r}
CANDIDATES = ({{"refused": SECRET}}, [SECRET], SECRET)

def refused(hint):
    for value in CANDIDATES:
        try:
            TypeAdapter(hint).validate_python(value)
        except ValidationError:
            return value
    return None

runs = {{}}
for deployment in yaml.safe_load(open("prefect.yaml"))["deployments"]:
    path, name = deployment["entrypoint"].split(":")
    module = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    flow = getattr(importlib.import_module(module), name)
    hints = typing.get_type_hints(flow.fn)
    chosen = next((p for p in inspect.signature(flow.fn).parameters if p in hints
                   and refused(hints[p]) is not None), None)
    if chosen is None:
        runs[deployment["name"]] = None
        continue
    required = [p.name for p in inspect.signature(flow.fn).parameters.values()
                if p.default is inspect.Parameter.empty]
    given = {{p: "-" for p in required}} | {{chosen: refused(hints[chosen])}}
    state = flow(**given, return_state=True)
    runs[deployment["name"]] = [chosen, str(state.state_details.flow_run_id), state.type.value]
print(json.dumps(runs))
"""


def test_every_deployed_flow_stores_a_placeholder_for_a_refused_parameter(
    prefect_api: str,
) -> None:
    """eval-run and eval-shard stored a placeholder for a parameter that does not validate;
    aggregate, reverify, study and nightly stored it as given (a key in a URL, in plain text in
    the flow run's parameters). Every flow gymflow deploys is a LeanFlow now: each deployment
    in prefect.yaml (a new one included) is run through Prefect with a refused value, and the
    flow run's parameters and logs hold no trace of it."""
    done = subprocess.run(
        [sys.executable, "-c", _EVERY_DEPLOYED_FLOW],
        cwd=Path(__file__).parents[2],
        env={**os.environ, **gym_env(prefect_api), "PREFECT_LOGGING_LEVEL": "INFO"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr
    runs = json.loads(done.stdout.splitlines()[-1])
    assert None not in runs.values(), runs  # each flow has a parameter a value can fail
    assert len(runs) >= 6, runs
    for deployment, (parameter, run_id, state) in runs.items():
        run = httpx.get(f"{prefect_api}/flow_runs/{run_id}", timeout=30).json()
        assert state == "FAILED" == run["state"]["type"], deployment
        assert run["parameters"][parameter] == REFUSED, (deployment, run["parameters"])
        logs = httpx.post(
            f"{prefect_api}/logs/filter",
            json={"logs": {"flow_run_id": {"any_": [run_id]}}},
            timeout=30,
        ).json()
        assert SECRET not in json.dumps(run) + json.dumps(logs), deployment


def test_a_config_naming_the_seal_key_as_its_api_key_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    """A colleague's config ("run our benchmark against our gateway") with `api_key_env:
    GYMFLOW_SEAL_KEY`, where a Prefect worker holds the seal key in that variable: gymflow sent
    the key to the gateway as the bearer. Refused at validation, the key never read or shown."""
    from tests.conftest import gym

    secret = "7aa832f96abe3a76e3ce66376833a37f6d2ddf1265221801e7e9b98e96136633"
    config = tmp_path / "colleague-eval.yaml"
    config.write_text(
        "benchmark: arithmetic-smoke\nlimit: 2\nrepeats: 1\nmodel:\n  kind: responses\n"
        "  base_url: http://127.0.0.1:9/v1\n  name: team-gateway-model\n"
        "  api_key_env: GYMFLOW_SEAL_KEY\n"
    )
    ran = gym("eval", "run", str(config), "--out", "run", cwd=tmp_path,
              env={"GYMFLOW_SEAL_KEY": secret})  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr
    said = " ".join(ran.stderr.split())
    assert "model.api_key_env" in said and "holds gymflow's seal key" in said, said
    assert secret not in ran.stdout + ran.stderr
    assert not (tmp_path / "run").exists()
