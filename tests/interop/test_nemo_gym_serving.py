"""NeMo Gym servers run as NeMo Gym runs them (issue 44): each test writes a small resources
server of its own, laid out as NeMo Gym's repository, that misbehaves in one way a real one
does (prints at start-up, starts Ray, downloads, raises in /verify, interpolates its config,
asks a judge, speaks gymnasium's routes), and runs it with NeMo Gym's real interpreter
(`GYMFLOW_NEMO_GYM_VENV`, .ci/run makes it) through gymflow's resources or `gym` itself."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import gym

VENV = Path(os.environ.get("GYMFLOW_NEMO_GYM_VENV", "/tmp/nemo-gym-venv"))

HEADER = """
from fastapi import FastAPI
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer,
)
"""
#: A server whose /verify rewards the text of the last message by `rule`.
SERVER = """
class FakeConfig(BaseResourcesServerConfig):
    answer: str = "ok"
    level: int = 0
{config}

class FakeServer(SimpleResourcesServer):
    config: FakeConfig

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        text = body.response.output[-1].content[0].text
{verify}
"""
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "say ok"}]}}


def write_server(
    root: Path, name: str, *, top: str = "", config: str = "", verify: str = "",
    fields: str = "", rows: list | None = None,
) -> Path:  # fmt: skip
    folder = root / "resources_servers" / name
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    body = SERVER.format(
        config=textwrap.indent(textwrap.dedent(config), "    "),
        verify=textwrap.indent(
            textwrap.dedent(verify or "return BaseVerifyResponse(**body.model_dump(), "
                            "reward=float(text == self.config.answer))"), "        "),
    )  # fmt: skip
    (folder / "app.py").write_text(HEADER + textwrap.dedent(top) + body)
    (folder / "configs" / f"{name}.yaml").write_text(
        f"{name}:\n  resources_servers:\n    {name}:\n      entrypoint: app.py\n"
        f"      domain: other\n      description: a test server\n"
        + textwrap.indent(textwrap.dedent(fields), "      ")
        + f"{name}_agent:\n  responses_api_agents:\n    simple_agent:\n      entrypoint: app.py\n"
        f"      resources_server: {{type: resources_servers, name: {name}}}\n"
        f"      datasets:\n      - {{name: example, type: example, "
        f"jsonl_fpath: resources_servers/{name}/data/example.jsonl}}\n"
    )
    (folder / "data" / "example.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows or [ROW])
    )
    return folder


@pytest.fixture
def nemo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if not (VENV / "bin" / "python").exists():
        if os.environ.get("CI"):
            pytest.fail(f"{VENV} missing: .ci/run installs nemo-gym==0.4.0 there")
        pytest.skip(f"no NeMo Gym venv at {VENV}")
    root = tmp_path / "ng"
    monkeypatch.setenv("GYMFLOW_NEMO_GYM_VENV", str(VENV))
    monkeypatch.setenv("GYMFLOW_NEMO_GYM_PATH", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from gymflow.environments.nemo_gym import folder

    folder._servers.cache_clear()
    yield root
    folder._servers.cache_clear()


def _env(name: str):
    from gymflow.environments.nemo_gym.environment import NemoGymEnvironment
    from gymflow.environments.nemo_gym.folder import nemo_servers

    return NemoGymEnvironment(nemo_servers()[f"ng-{name}"])


def _answer(text: str) -> list[dict]:
    return [
        {"role": "user", "content": "say ok"},
        {"type": "message", "role": "assistant", "id": "m1", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": []}]},
    ]  # fmt: skip


async def _verify(resources, task, text: str):
    session = await resources.seed_session(task)
    return await resources.verify(session, task, text, _answer(text))


def _verdicts(env, texts: list[str], params: dict | None = None):
    resources = env.resources_server(params)

    async def run():
        resources.open(None)
        try:
            task = env.tasks("example")[0]
            return [await _verify(resources, task, text) for text in texts]
        finally:
            await resources.aclose()

    return asyncio.run(run())


def test_prints_at_start_are_not_its_port_and_config_is_resolved(nemo: Path, monkeypatch) -> None:
    """ifbench and vlm_eval_kit print while they are built; math_formal_lean's port is an
    `${oc.env:...}`; verifif's judge URL is `${policy_base_url}`."""
    monkeypatch.setenv("GYMFLOW_TEST_LEVEL", "7")
    monkeypatch.setenv("GYMFLOW_CHILD_ENV", "GYMFLOW_TEST_LEVEL")  # the server reads it
    write_server(
        nemo, "chatty",
        top='print(\'{"port": 1}\')\nprint("building the index...", flush=True)\n',
        config="judge_url: str = ''",
        fields="level: ${oc.env:GYMFLOW_TEST_LEVEL,3}\nanswer: ok\njudge_url: ${policy_base_url}\n",
        verify="""\
            assert self.config.level == 7 and self.config.judge_url.endswith('/v1'), self.config
            return BaseVerifyResponse(**body.model_dump(), reward=float(text == self.config.answer))
        """,
    )  # fmt: skip
    env = _env("chatty")
    right, wrong = _verdicts(env, ["ok", "no"], {"judge": {"base_url": "http://127.0.0.1:9/v1",
                                                           "model": "j"}})  # fmt: skip
    assert (right.status, right.reward, wrong.reward) == ("ok", 1.0, 0.0), right


def test_a_500_carries_its_cause_and_the_servers_log(nemo: Path) -> None:
    """asr_with_pc's 500 read only "Internal Server Error"; its cause was a missing module."""
    write_server(nemo, "crashy", verify="""\
        print("about to fail on", repr(text))
        raise KeyError("expected_answer")
    """)  # fmt: skip
    (verdict,) = _verdicts(_env("crashy"), ["ok"])
    assert verdict.status == "error" and verdict.failure_kind == "verifier_error"
    error = verdict.details["error"]
    assert "KeyError('expected_answer')" in error  # NeMo Gym's middleware: repr(e)
    assert "about to fail on 'ok'" in error and "Traceback" in error  # the log's tail


@pytest.mark.parametrize(
    ("top", "said"),
    [
        ("import ray\nray.init()\n", "starts Ray (ray.init), which gymflow keeps off"),
        ("import urllib.request\nurllib.request.urlopen('https://huggingface.co/x')\n",
         "tried to reach huggingface.co:443"),
    ],
    ids=["ray", "network"],
)  # fmt: skip
def test_ray_and_the_network_at_start_are_refused_with_the_reason(
    nemo: Path, top: str, said: str
) -> None:
    from gymflow.core.config import ConfigError

    write_server(nemo, "needy", top=top)
    with pytest.raises(ConfigError) as refused:
        _verdicts(_env("needy"), ["ok"])
    assert said in str(refused.value), refused.value
    assert "did not start" in str(refused.value)


def test_gymnasium_routes_are_refused_before_the_first_rollout(nemo: Path) -> None:
    from gymflow.core.config import ConfigError

    write_server(nemo, "gymlike")
    folder = nemo / "resources_servers" / "gymlike"
    app = folder / "app.py"
    app.write_text(app.read_text() + textwrap.dedent("""
        def _routes(self):
            app = FastAPI()
            app.post("/reset")(self.verify)
            app.post("/step")(self.verify)
            return app
        FakeServer.setup_webserver = _routes
    """))  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        _verdicts(_env("gymlike"), ["ok"])
    assert "has no POST route /seed_session, /verify" in str(refused.value)
    assert "gymnasium_agent" in str(refused.value)


def test_identical_rows_are_tasks_of_their_own_and_an_empty_input_is_named(nemo: Path) -> None:
    from gymflow.environments.dataset.readers import DatasetError
    from gymflow.environments.nemo_gym import folder

    write_server(nemo, "twice", rows=[ROW, ROW, {"responses_create_params": {"input": [
        {"role": "user", "content": "other"}]}}, ROW])  # fmt: skip
    ids = [t.task_id for t in _env("twice").tasks("example")]
    assert len(set(ids)) == 4 and ids[1] == f"{ids[0]}~2" and ids[3] == f"{ids[0]}~3"
    assert ids == [t.task_id for t in _env("twice").tasks("example")]  # stable

    write_server(nemo, "empty", rows=[ROW, {"responses_create_params": {"input": []}}])
    folder._servers.cache_clear()
    with pytest.raises(DatasetError) as refused:
        _env("empty").tasks("example")
    assert "line 2: field 'responses_create_params.input': an empty list" in str(refused.value)


def test_reward_range_comes_from_the_server_not_a_fixed_unit_range(nemo: Path) -> None:
    folder = write_server(nemo, "double", verify="""\
        return BaseVerifyResponse(**body.model_dump(), reward=2.0 * (text == "ok"))
    """)  # fmt: skip
    recorded = {**ROW, "reward": 2.0, "response": {"output": []}}
    (folder / "data" / "example_rollouts.jsonl").write_text(json.dumps(recorded) + "\n")
    env = _env("double")
    assert env.manifest.reward_range == (0.0, 2.0)
    (verdict,) = _verdicts(env, ["ok"])
    assert verdict.reward == 2.0 and "out_of_range" not in verdict.details


def test_a_slow_verify_is_bounded_and_says_what_it_waits_on(nemo: Path, prefect_api: str) -> None:
    """As typed: `gym eval run` shows, while a server's `/verify` hangs, what it waits on (a
    print inside the flow run was Prefect's, logged at a level gym drops: no one saw it), then
    records the rollout as a `verifier_timeout` with the server's last words."""
    import duckdb

    from gymflow.environments.nemo_gym.resources import VERIFY_BOUND_VARIABLE

    write_server(nemo, "slow", top="import asyncio\n", verify="""\
        print("judging with a long think", flush=True)
        await asyncio.sleep(60)
    """)  # fmt: skip
    env = {**_cli_env(nemo), "PREFECT_API_URL": prefect_api, VERIFY_BOUND_VARIABLE: "3"}
    ran = gym("eval", "run", "--environment", "ng-slow", "--limit", "1", "--repeats", "1",
              "--out", "run", cwd=nemo.parent, env=env, timeout=300)  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr  # every rollout failed: the gate fails
    said = " ".join(ran.stderr.split())
    assert "gymflow: NeMo Gym server slow: /verify of task" in said, ran.stderr
    assert "has waited 1 s of 3; no judge is configured" in said
    con = duckdb.connect(str(nemo.parent / "run" / "gymflow.duckdb"), read_only=True)
    try:
        [(kind, details)] = con.execute(
            "SELECT failure_kind, details_json FROM verifications"
        ).fetchall()
    finally:
        con.close()
    error = json.loads(details)["error"]
    assert kind == "verifier_timeout" and "gave no answer in 3 s" in error
    assert "judging with a long think" in error


def test_prepare_refuses_a_requirement_not_on_the_registries(nemo: Path) -> None:
    folder = write_server(nemo, "gitreq")
    (folder / "requirements.txt").write_text(
        "-e nemo-gym[dev] @ ../../\nsegale @ git+https://github.com/x/y.git@abc\n"
    )
    done = gym("env", "prepare", "ng-gitreq", env=_cli_env(nemo), cwd=nemo.parent)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "segale @ git+https://github.com/x/y.git@abc" in done.stdout
    assert "is not a package on the registries" in done.stdout
    ran = gym("eval", "run", "--environment", "ng-gitreq", "--out", "run", env=_cli_env(nemo),
              cwd=nemo.parent)  # fmt: skip
    assert ran.returncode == 1 and "is not a package on the registries" in ran.stderr


def _cli_env(root: Path) -> dict[str, str]:
    return {
        "GYMFLOW_NEMO_GYM_VENV": str(VENV),
        "GYMFLOW_NEMO_GYM_PATH": str(root),
        "XDG_CACHE_HOME": str(root.parent / "cache"),
    }


def test_prepare_installs_a_servers_requirements_once(
    tmp_path: Path, prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """structured_outputs needs openapi-schema-validator, tomli-w and xmltodict, which
    `pip install nemo-gym` does not bring: prepared into a venv of its own, from the registries,
    once; then it runs."""
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no NeMo Gym venv at {VENV}")
    site = next(VENV.glob("lib/python3*/site-packages"))
    env = {"GYMFLOW_NEMO_GYM_VENV": str(VENV), "GYMFLOW_NEMO_GYM_PATH": str(site),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PREFECT_API_URL": prefect_api}  # fmt: skip
    name = "ng-structured_outputs-structured_outputs_json"
    first = gym("env", "prepare", name, cwd=tmp_path, env=env, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    said = " ".join(first.stdout.split())
    assert "installing openapi-schema-validator==0.6.3 tomli-w==1.2.0 xmltodict==1.0.2" in said
    assert f"{name}: installed openapi-schema-validator==0.6.3" in said
    again = gym("env", "prepare", name, cwd=tmp_path, env=env, check=True)
    assert (
        "ready (openapi-schema-validator==0.6.3" in again.stdout
        and "installing" not in again.stdout
    )
    ran = gym("eval", "run", "--environment", name, "--limit", "2",
              "--repeats", "1", "--out", "run", cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    assert ran.returncode in (0, 2), ran.stdout + ran.stderr
    import duckdb

    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        statuses = con.execute("SELECT status FROM verifications").fetchall()
    finally:
        con.close()
    assert statuses == [("ok",), ("ok",)]


def test_listing_names_every_server_and_keeps_an_index(nemo: Path) -> None:
    """Every server folder is listed or printed with the reason; what listing found is kept on
    disk and found again when a file it read changes."""
    write_server(nemo, "listed")
    unlisted = nemo / "resources_servers" / "nodata"
    (unlisted / "configs").mkdir(parents=True)
    (unlisted / "app.py").write_text("")
    (unlisted / "configs" / "nodata.yaml").write_text(
        "nodata:\n  resources_servers:\n    nodata: {entrypoint: app.py}\n"
    )
    env = _cli_env(nemo)
    shown = gym("list", "environments", cwd=nemo.parent, env=env, check=True).stdout
    assert "ng-listed" in shown
    assert "NeMo Gym servers not listed (1):" in shown
    assert "nodata: its configs list no dataset" in shown
    (found,) = (nemo.parent / "cache" / "gymflow" / "nemo-gym-index").glob("*.json")
    assert json.loads(found.read_text())[0]["name"] == "listed"

    config = nemo / "resources_servers" / "listed" / "configs" / "listed.yaml"
    config.write_text(config.read_text().replace("a test server", "a server changed"))
    listed = gym("list", "environments", "--json", cwd=nemo.parent, env=env, check=True)
    (entry,) = [e for e in json.loads(listed.stdout) if e["name"] == "ng-listed"]
    assert entry["description"].startswith("a server changed")


def test_a_judge_that_fails_is_a_verifier_error_not_the_servers_zero(nemo: Path) -> None:
    """A server that catches its judge's failure and answers reward 0 (as judge servers do)
    gets `judge_failed`: the 0 was never the judge's."""
    write_server(nemo, "judged", fields="judge_model_server: {type: responses_api_models, "
                 "name: judge_model}\n", config="judge_model_server: dict = {}", verify="""\
        try:
            answer = await self.server_client.post(server_name="judge_model",
                url_path="/v1/responses", json={"input": [{"role": "user", "content": text}]})
            answer.raise_for_status()
        except Exception as exc:
            print("the judge failed:", repr(exc))
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
    """)  # fmt: skip
    env = _env("judged")
    assert env.refusals({}) and "verifier_params.judge" in env.refusals({})[0]
    dead = {"base_url": "http://127.0.0.1:9/v1", "model": "gone", "max_retries": 0}
    (verdict,) = _verdicts(env, ["ok"], {"judge": dead})
    assert verdict.status == "error" and verdict.failure_kind == "judge_failed", verdict
    assert "the judge gone failed on 1 of 1 calls" in verdict.details["error"]


def test_each_rollout_is_a_session_of_its_own(nemo: Path) -> None:
    """example_session_state_mgmt seeds a counter per session (`setdefault`) and verifies its
    final count: the HTTP client once kept the first rollout's session cookie and sent it with
    the next `/seed_session`, so every later rollout counted on the first one's counter."""
    folder = write_server(nemo, "counter", rows=[{**ROW, "start": n} for n in (3, 40, 500)])
    (folder / "app.py").write_text(textwrap.dedent("""
        from fastapi import Request
        from nemo_gym.base_resources_server import (
            BaseResourcesServerConfig, BaseSeedSessionRequest, BaseSeedSessionResponse,
            BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer,
        )

        class Seed(BaseSeedSessionRequest):
            start: int

        class Verify(BaseVerifyRequest):
            start: int

        class CounterServer(SimpleResourcesServer):
            config: BaseResourcesServerConfig
            counts: dict = {}

            async def seed_session(self, request: Request, body: Seed) -> BaseSeedSessionResponse:
                self.counts.setdefault(request.session["session_id"], body.start)
                return BaseSeedSessionResponse()

            async def verify(self, request: Request, body: Verify) -> BaseVerifyResponse:
                count = self.counts.get(request.session["session_id"])
                return BaseVerifyResponse(**body.model_dump(), reward=float(count == body.start))
    """))  # fmt: skip
    env = _env("counter")
    resources = env.resources_server()

    async def run():
        resources.open(None)
        try:
            return [await _verify(resources, task, "ok") for task in env.tasks("example")]
        finally:
            await resources.aclose()

    verdicts = asyncio.run(run())
    assert [(v.status, v.reward) for v in verdicts] == [("ok", 1.0)] * 3, verdicts


def test_a_servers_pyproject_dependencies_are_its_requirements(nemo: Path) -> None:
    """code_fim has no requirements.txt: NeMo Gym installs its pyproject.toml's dependencies.
    One `[tool.uv.sources]` takes from a git repository is refused, named (code_fim's
    `human-eval-infilling`: PyPI's 2.15.0 of that name holds no module); so is a URL."""
    from gymflow.environments.nemo_gym.folder import nemo_servers
    from gymflow.environments.nemo_gym.prepare import PrepareError, requirements

    folder = write_server(nemo, "fim")
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(textwrap.dedent("""
        [project]
        name = "fim"
        dependencies = ["nemo-gym[dev]", "tomli-w==1.2.0", "Human_Eval_Infilling"]
        [tool.uv.sources]
        nemo-gym = { path = "../..", editable = true }
    """))  # fmt: skip
    server = nemo_servers()["ng-fim"]
    assert requirements(server) == ("tomli-w==1.2.0", "Human_Eval_Infilling")
    git = 'human-eval-infilling = { git = "https://github.com/wasiahmad/human-eval-infilling" }'
    pyproject.write_text(pyproject.read_text() + git + "\n")
    with pytest.raises(PrepareError) as refused:
        requirements(server)
    said = str(refused.value)
    assert "pyproject.toml:dependencies[2]: 'Human_Eval_Infilling' comes from https://" in said
    assert "not a package on the registries" in said
    pyproject.write_text(
        '[project]\nname = "fim"\ndependencies = ["x @ git+https://github.com/x/y.git"]\n'
    )
    with pytest.raises(PrepareError) as refused:
        requirements(server)
    assert "pyproject.toml:dependencies[0]" in str(refused.value)


def test_prepare_keeps_the_extras_a_requirement_names(nemo: Path) -> None:
    """google_search's trafilatura needs justext, which needs `lxml[html_clean]`; lxml names
    that extra `html-clean`. NeMo Gym venv's pip (23.2) dropped it ("lxml does not provide the
    extra 'html_clean'") and the server failed to import `lxml.html.clean`; a server's venv is
    built with a pip that normalises extras (PEP 685), as NeMo Gym's uv does."""
    from gymflow.environments.nemo_gym.folder import nemo_servers
    from gymflow.environments.nemo_gym.prepare import prepare

    folder = write_server(nemo, "extras")
    (folder / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../\nlxml[html_clean]\n")
    done = prepare(nemo_servers()["ng-extras"], say=lambda _: None)
    assert done.installed == ("lxml[html_clean]",) and not done.cached
    check = subprocess.run(
        [str(done.python), "-c", "import lxml.html.clean, lxml_html_clean"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_a_server_that_looks_its_judge_up_at_start_finds_gymflows(nemo: Path) -> None:
    """xstest, before it serves, polls its judge's model server by name (`poll_for_status`),
    then probes `/v1/responses` at the address NeMo Gym's global config gives that name: both
    reach gymflow's judge, and the probe (no input) is answered without asking the judge. Its
    verify's judge call is the judge's as every other server's (here a judge that is gone)."""
    folder = write_server(
        nemo, "lookup",
        fields="judge_model_server: {type: responses_api_models, name: wildguard}\n",
        config="judge_model_server: dict = {}",
        verify="""\
            answer = await self.server_client.post(server_name="wildguard",
                url_path="/v1/responses", json={"input": [{"role": "user", "content": text}]})
            return BaseVerifyResponse(**body.model_dump(), reward=float(answer.ok))
        """,
    )  # fmt: skip
    app = folder / "app.py"
    app.write_text(app.read_text() + textwrap.dedent("""
        import requests
        from nemo_gym.global_config import get_first_server_config_dict

        def _setup(self):
            client = self.server_client
            assert client.poll_for_status("wildguard") == "success"
            placed = get_first_server_config_dict(client.global_config_dict, "wildguard")
            probe = requests.post(f"{client._build_server_base_url(placed)}/v1/responses",
                                  json={"input": []}, timeout=10)
            print("the probe answered", probe.status_code, probe.text, flush=True)
            return SimpleResourcesServer.setup_webserver(self)

        FakeServer.setup_webserver = _setup
    """))  # fmt: skip
    dead = {"base_url": "http://127.0.0.1:9/v1", "model": "gone", "max_retries": 0}
    env = _env("lookup")
    resources = env.resources_server({"judge": dead})

    async def run():
        resources.open(None)
        try:
            log = resources.log_tail()
            return log, await _verify(resources, env.tasks("example")[0], "ok")
        finally:
            await resources.aclose()

    log, verdict = asyncio.run(run())
    assert "the probe answered 400" in log and "asks nothing" in log, log
    assert verdict.failure_kind == "judge_failed", verdict
    assert "the judge gone failed on 1 of 1 calls" in verdict.details["error"]


def _calculator_rows(site: Path) -> tuple[list[dict], list[dict]]:
    """Two rows of math_advanced_calculations and a recorded rollout of each (a passing and a
    failing play with the same calls): one divides by zero, then divides again and gets its
    value (NeMo Gym: reward 1); the other only divides by zero (reward 0)."""
    example = site / "resources_servers" / "math_advanced_calculations" / "data" / "example.jsonl"
    request = json.loads(example.read_text().splitlines()[0])["responses_create_params"]

    def call(n: int, a: float, b: float, output: str) -> list[dict]:
        return [
            {"type": "function_call", "call_id": f"c{n}", "name": "divide",
             "arguments": json.dumps({"a": a, "b": b})},
            {"type": "function_call_output", "call_id": f"c{n}", "output": output},
        ]  # fmt: skip

    def said(text: str) -> dict:
        return {"type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip

    zero = '{"detail":"float division by zero"}'
    plays = [
        ("Get me (1.0 / 0.0); if it has none, (1.0 / 1.0).", "[0.5]",
         [*call(1, 1, 0, zero), *call(2, 1, 1, '{"solution": 0.5}'), said("1/1 is 0.5")]),
        ("Get me (2.0 / 0.0).", "[1.0]", [*call(1, 2, 0, zero), said("it has no value")]),
    ]  # fmt: skip
    rows, recorded = [], []
    for i, (question, truth, output) in enumerate(plays):
        params = {**request, "input": [{"role": "user", "content": question}]}
        row = {"responses_create_params": params, "ground_truth": truth, "id": i, "depth": 1,
               "breadth": 1}  # fmt: skip
        rows.append(row)
        recorded += [{**row, "response": {"output": output}, "reward": r} for r in (1.0, 0.0)]
    return rows, recorded


def test_a_tool_route_answering_500_goes_to_the_model_and_is_kept(
    nemo: Path, prefect_api: str
) -> None:
    """math_advanced_calculations' tool routes answer 500 when their function raises (`divide`
    by zero: `{"detail":"float division by zero"}`). NeMo Gym's simple agent hands whatever a
    tool route answers to the model and goes on, so a rollout that divides again gets its value
    and NeMo Gym's reward 1; gymflow failed it (`tool_error`). Now the model reads the body, the
    rollout is verified, and the failure is kept: the rollout's error, `gym eval health`'s
    `tool_server_error`, `gym eval diagnose`'s `tool_error` / `tool_server_error`."""
    import shutil

    import duckdb

    site = next(VENV.glob("lib/python3*/site-packages"))
    shutil.copytree(
        site / "resources_servers" / "math_advanced_calculations",
        nemo / "resources_servers" / "math_advanced_calculations",
        ignore=shutil.ignore_patterns("__pycache__", "tests", "*_metrics.json"),
    )
    data = nemo / "resources_servers" / "math_advanced_calculations" / "data"
    rows, recorded = _calculator_rows(site)
    (data / "example.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "example_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recorded))
    env = {**_cli_env(nemo), "PREFECT_API_URL": prefect_api}
    ran = gym("eval", "run", "--environment", "ng-math_advanced_calculations", "--repeats", "2",
              "--out", "run", cwd=nemo.parent, env=env, timeout=600)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr

    con = duckdb.connect(str(nemo.parent / "run" / "gymflow.duckdb"), read_only=True)
    try:
        stored = con.execute(
            "SELECT json_extract(t.data_json, '$.id')::INTEGER, r.status, r.failure_kind, "
            "r.error, json_extract(r.counters_json, '$.tool_server_errors')::INTEGER, "
            "v.status, v.reward, r.rollout_id FROM rollouts r JOIN tasks t USING (task_id) "
            "JOIN verifications v USING (rollout_id) ORDER BY 1"
        ).fetchall()
        sent = con.execute("SELECT rollout_id, request_json FROM model_calls").fetchall()
    finally:
        con.close()
    assert [(row[0], row[1], row[2], row[5], row[6]) for row in stored] == [
        (0, "completed", None, "ok", 1.0), (0, "completed", None, "ok", 1.0),
        (1, "completed", None, "ok", 0.0), (1, "completed", None, "ok", 0.0),
    ]  # fmt: skip
    for _, _, _, error, count, *_ in stored:
        assert count == 1
        assert "/divide answered 500: " in error and "float division by zero" in error
    told = {  # the rollouts whose model was sent the 500's body as the tool's output
        rollout_id
        for rollout_id, request in sent
        for item in json.loads(request)["input"]
        if item.get("type") == "function_call_output"
        and item["output"] == '{"detail":"float division by zero"}'
    }
    assert told == {row[7] for row in stored}

    health = gym("eval", "health", "run", "--json", cwd=nemo.parent, env=env)
    check = json.loads(health.stdout)["checks"]["tool_server_error"]
    assert (check["status"], check["count"], check["severity"]) == ("failed", 4, "warning")
    shown = gym("eval", "health", "run", cwd=nemo.parent, env=env).stdout
    assert "tool_server_error" in shown and "warnings: tool_server_error" in " ".join(shown.split())
    diagnosed = gym("eval", "diagnose", "run", "--json", cwd=nemo.parent, env=env)
    taxonomy = json.loads(diagnosed.stdout)["taxonomy"]
    failing = {row[7] for row in stored if row[6] == 0.0}
    assert [(t["category"], t["kind"], t["rollouts"], set(t["examples"])) for t in taxonomy] == [
        ("tool_error", "tool_server_error", 2, failing)
    ]
    assert "tool_server_error" in gym("eval", "diagnose", "run", cwd=nemo.parent, env=env).stdout
