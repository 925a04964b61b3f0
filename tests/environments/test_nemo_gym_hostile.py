"""A NeMo Gym environment whose server answers badly, and rows NeMo Gym could not run: each is a
clear error or a failure of its own kind, never a reward of 0.

The folder is laid out as NeMo Gym's repository is (resources_servers/fake/app.py, configs,
data/example.jsonl and the recorded rollouts the simulated policy replays); its server is a small
FastAPI app on 127.0.0.1, given as `resources_url`, with its session in a cookie as NeMo Gym's
middleware keeps it, so rollouts running at once must each keep their own."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

# gym, not gym_in_process: a process loads a NeMo Gym environment once by name, whatever
# GYMFLOW_NEMO_GYM_PATH names later (in-process, the second test here read the first's folder)
from tests.conftest import gym
from tests.faults.test_attacks_resources import serving

TOOLS = [
    {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
    for name in ("bump", "explode", "strict")
]
#: case -> the tool the recorded passing rollout calls (None: it answers at once)
CASES = {
    "ok": None,
    "no_reward": None,
    "nan_reward": None,
    "text_reward": None,
    "list_reply": None,
    "bad_request": None,
    "crash": None,
    "tool_500": "explode",
    "tool_422": "strict",
    "session": "bump",
}


def fake_app() -> FastAPI:
    app = FastAPI()
    counts: dict[str, int] = {}

    def sid(request: Request) -> str:
        return request.cookies.get("session", "")

    @app.post("/seed_session")
    async def seed(request: Request, response: Response) -> dict:
        session = uuid.uuid4().hex
        counts[session] = 0
        response.set_cookie("session", session)
        return {}

    @app.post("/bump")
    async def bump(request: Request) -> dict:
        counts[sid(request)] += 1
        return {"count": counts[sid(request)]}

    @app.post("/explode")
    async def explode() -> Response:
        return Response("Internal Server Error", status_code=500)

    @app.post("/strict")
    async def strict() -> Response:
        return JSONResponse({"detail": [{"loc": ["body", "x"], "msg": "missing"}]}, 422)

    @app.get("/reverify_mode")
    async def reverify_mode() -> str:
        return "stateless"

    @app.post("/verify")
    async def verify(request: Request) -> Response:
        body = await request.json()
        case = body["case"]
        output = body["response"]["output"]
        if case == "session":  # the server's count for this cookie is the rollout's own calls
            bump_ids = {i["call_id"] for i in output if i.get("name") == "bump"}
            bumps = sum(
                1
                for i in output
                if i.get("call_id") in bump_ids
                and i.get("type") == "function_call_output"
                and not i["output"].startswith("error")  # malformed: gymflow never sent it
            )
            return JSONResponse({**body, "reward": float(counts[sid(request)] == bumps)})
        replies = {
            "no_reward": JSONResponse({"score": 1.0}),
            "nan_reward": Response('{"reward": NaN}', media_type="application/json"),
            "text_reward": JSONResponse({"reward": "1.0"}),
            "list_reply": JSONResponse([1.0]),
            "bad_request": JSONResponse({"detail": "expected_answer: field required"}, 422),
            "crash": Response("Internal Server Error", status_code=500),
        }
        return replies.get(case) or JSONResponse({**body, "reward": 1.0, "judge_note": "fine"})

    return app


def _row(case: str) -> dict:
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": f"case {case}: do it"}],
            "tools": TOOLS,
        },
        "case": case,
    }


def _recorded(case: str, tool: str | None, reward: float) -> dict:
    output = []
    if tool:
        output = [
            {"type": "function_call", "call_id": "c1", "name": tool, "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "{}"},
        ]
    output.append({"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "done", "annotations": []}]})  # fmt: skip
    return {**_row(case), "response": {"output": output}, "reward": reward}


def _folder(root: Path, rows: list[dict], recorded: list[dict] = ()) -> Path:
    server = root / "resources_servers" / "fake"
    (server / "configs").mkdir(parents=True)
    (server / "data").mkdir()
    (server / "app.py").write_text("# served by the test's FastAPI fake\n")
    (server / "configs" / "fake.yaml").write_text(
        "fake:\n  resources_servers:\n    fake:\n      entrypoint: app.py\n      domain: agent\n"
        "      description: A hostile fake\nfake_agent:\n  responses_api_agents:\n"
        "    simple_agent:\n      resources_server: {type: resources_servers, name: fake}\n"
        "      datasets:\n      - {name: example, type: example,"
        " jsonl_fpath: resources_servers/fake/data/example.jsonl}\n"
    )
    (server / "data" / "example.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (server / "data" / "example_rollouts.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in recorded)
    )
    return root


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory, prefect_api: str):
    work = tmp_path_factory.mktemp("hostile")
    # a passing and a failing recorded rollout alike: whichever the simulated policy plays, it
    # makes the same calls
    recorded = [_recorded(c, t, r) for c, t in CASES.items() for r in (1.0, 0.0)]
    _folder(work / "ng", [_row(c) for c in CASES], recorded)
    with serving(fake_app()) as url:
        (work / "eval.yaml").write_text(
            f"environment: ng-fake\nrepeats: 3\nout: run\nresources_url: {url}\n"
        )
        env = {"GYMFLOW_NEMO_GYM_PATH": str(work / "ng"), "PREFECT_API_URL": prefect_api}
        ran = gym("eval", "run", "eval.yaml", cwd=work, env=env, timeout=600)
        yield HostileRun(ran, _by_case(work / "run"), work, env)


@dataclass
class HostileRun:
    ran: subprocess.CompletedProcess[str]
    by_case: dict[str, list[tuple]]
    work: Path
    env: dict[str, str]


def _by_case(run: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT json_extract_string(t.data_json, '$.case'), r.status, r.failure_kind, "
            "v.status, v.reward, v.failure_kind, v.details_json, r.trajectory_json "
            "FROM rollouts r JOIN tasks t USING (task_id) "
            "LEFT JOIN verifications v USING (rollout_id)"
        ).fetchall()
    finally:
        con.close()
    by_case: dict[str, list[tuple]] = {}
    for case, *rest in rows:
        by_case.setdefault(case, []).append(tuple(rest))
    return by_case


def _sent_outputs(trajectory: str) -> list[str]:
    """The outputs of the calls gymflow sent the server (the simulated policy's malformed
    calls are answered by the harness, never sent)."""
    items = json.loads(trajectory)
    return [
        i["output"]
        for i in items
        if i.get("type") == "function_call_output"
        and not i["output"].startswith("error: malformed arguments")
    ]


def test_each_bad_answer_is_its_own_failure_never_a_zero(hostile_run) -> None:
    ran, by_case = hostile_run.ran, hostile_run.by_case
    assert ran.returncode == 2, ran.stdout + ran.stderr  # most rollouts unscored: the gate fails
    assert set(by_case) == set(CASES) and all(len(v) == 3 for v in by_case.values())
    expected_errors = {
        "no_reward": "bad_verify_reply",
        "list_reply": "bad_verify_reply",
        "nan_reward": "bad_reward",
        "text_reward": "bad_reward",
        "bad_request": "bad_verify_request",
        "crash": "verifier_error",
    }
    for case, kind in expected_errors.items():
        for status, _, v_status, reward, v_kind, details, _ in by_case[case]:
            assert (status, v_status, reward, v_kind) == ("completed", "error", None, kind), case
            assert "NeMo Gym server http://127.0.0.1:" in json.loads(details)["error"]
    # the tool's server failed: as NeMo Gym's agent, the model reads its answer and goes on to
    # the verdict; the failure is the rollout's error, not hidden
    for status, failure, v_status, reward, _, _, trajectory in by_case["tool_500"]:
        assert (status, failure, v_status, reward) == ("completed", None, "ok", 1.0)
        assert _sent_outputs(trajectory) == ["Internal Server Error"]
    con = duckdb.connect(str(hostile_run.work / "run" / "gymflow.duckdb"), read_only=True)
    try:
        errors = con.execute(
            "SELECT r.error, json_extract(r.counters_json, '$.tool_server_errors')::INTEGER "
            "FROM rollouts r JOIN tasks t USING (task_id) "
            "WHERE json_extract_string(t.data_json, '$.case') = 'tool_500'"
        ).fetchall()
    finally:
        con.close()
    assert len(errors) == 3
    for error, count in errors:
        assert count == 1 and "/explode answered 500: Internal Server Error" in error


def test_good_answers_are_judged_here_with_the_servers_fields(hostile_run) -> None:
    by_case = hostile_run.by_case
    for _, _, v_status, reward, _, details, _ in by_case["ok"]:
        assert (v_status, reward) == ("ok", 1.0)
        assert json.loads(details) == {"judge_note": "fine"}  # the row's fields are not echoed
    for _, _, v_status, reward, _, _, trajectory in by_case["tool_422"]:
        assert (v_status, reward) == ("ok", 1.0)  # a 422's body goes back to the model
        assert [json.loads(o) for o in _sent_outputs(trajectory)] == [
            {"detail": [{"loc": ["body", "x"], "msg": "missing"}]}
        ]
    # three rollouts at once, each counted in its own cookie session
    assert [reward for _, _, _, reward, *_ in by_case["session"]] == [1.0, 1.0, 1.0]


def test_reverify_asks_the_runs_server_and_judges_its_errors_again(hostile_run) -> None:
    # the fake says its verifier is stateless (GET /reverify_mode): the verdicts that errored
    # are judged again at the run's resources_url, and error the same way
    done = gym("eval", "reverify", "run", "--json", cwd=hostile_run.work, env=hostile_run.env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == "rejudged"
    after = _by_case(hostile_run.work / "run")
    assert [v[2:5] for v in after["nan_reward"]] == [("error", None, "bad_reward")] * 3
    assert [v[2:4] for v in after["ok"]] == [("ok", 1.0)] * 3


def test_a_row_without_an_input_is_refused_naming_file_line_and_field(
    tmp_path: Path,
) -> None:
    bad = {"responses_create_params": {"tools": TOOLS}, "case": "no_input"}
    root = _folder(tmp_path / "ng", [_row("ok"), bad])
    env = {"GYMFLOW_NEMO_GYM_PATH": str(root)}
    ran = gym("eval", "run", "--environment", "ng-fake", "--out", "run", cwd=tmp_path, env=env)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    data = root / "resources_servers/fake/data/example.jsonl"
    assert f"{data}: line 2: field 'responses_create_params.input'" in ran.stderr
    assert not (tmp_path / "run" / "gymflow.duckdb").exists()


def test_without_a_venv_or_url_the_error_says_how_to_get_one(tmp_path: Path) -> None:
    root = _folder(tmp_path / "ng", [_row("ok")])
    env = {"GYMFLOW_NEMO_GYM_PATH": str(root), "GYMFLOW_NEMO_GYM_VENV": str(tmp_path / "none")}
    ran = gym("eval", "run", "--environment", "ng-fake", "--out", "run", cwd=tmp_path, env=env)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "pip install nemo-gym==0.4.0" in ran.stderr and "resources_url" in ran.stderr


def test_validate_names_a_tool_the_server_has_no_route_for(tmp_path: Path) -> None:
    row = _row("ok")
    row["responses_create_params"]["tools"] = [*TOOLS, {**TOOLS[0], "name": "nowhere"}]
    root = _folder(tmp_path / "ng", [row])
    with serving(fake_app()) as url:
        (tmp_path / "eval.yaml").write_text(f"environment: ng-fake\nresources_url: {url}\n")
        env = {"GYMFLOW_NEMO_GYM_PATH": str(root)}
        checked = gym("env", "validate", "eval.yaml", cwd=tmp_path, env=env)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"NeMo Gym server {url} has no POST route /nowhere" in checked.stdout + checked.stderr


def test_a_changed_search_path_loads_the_environment_from_its_new_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process (a Prefect worker, the in-process tests) that loads `ng-fake` under one
    `GYMFLOW_NEMO_GYM_PATH` and again under another gets the second folder's server, not the
    first one's kept from before."""
    from gymflow.environments.registry import load_environment

    first, second = _folder(tmp_path / "a", [_row("ok")]), _folder(tmp_path / "b", [_row("ok")])
    monkeypatch.setenv("GYMFLOW_NEMO_GYM_PATH", str(first))
    assert load_environment("ng-fake").server.root == first
    monkeypatch.setenv("GYMFLOW_NEMO_GYM_PATH", str(second))
    assert load_environment("ng-fake").server.root == second
