"""NeMo Gym's own resources servers, from the nemo-gym 0.4.0 package, under `gym eval run`.

gymflow finds them in the package's site-packages (`GYMFLOW_NEMO_GYM_PATH`), starts each on
127.0.0.1 with NeMo Gym's interpreter (`GYMFLOW_NEMO_GYM_VENV`, default /tmp/nemo-gym-venv;
.ci/run makes it), and runs it with the simulated policy, which replays NeMo Gym's recorded
rollouts. Then NeMo Gym judges the same responses itself, as its simple agent does (seed the
session with the row, replay the tool calls on the server, `/verify`), from the file
`gym export --format nemo-gym` writes: the rewards agree. Servers run: `mcqa` (single turn, its
own answer-letter verifier) and `example_session_state_mgmt` (tools on a counter kept in the
server's cookie session, verified on the session's final state)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym

VENV = Path(os.environ.get("GYMFLOW_NEMO_GYM_VENV", "/tmp/nemo-gym-venv"))
PYTHON = VENV / "bin" / "python"
SERVE_APP = Path(__file__).resolve().parents[2] / "src/gymflow/environments/nemo_gym/serve_app.py"

#: Runs in NeMo Gym's venv: its own server judges each exported rollout as its agent would.
JUDGE = r"""
import json, sys
from pathlib import Path
from fastapi.testclient import TestClient
sys.path.insert(0, str(Path(sys.argv[1]).parent))
from serve_app import build_app
app, _ = build_app(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), sys.argv[5], 0)
out = []
for line in Path(sys.argv[6]).read_text().splitlines():
    row = json.loads(line)
    body = {**row["task"], "responses_create_params": row["responses_create_params"]}
    with TestClient(app) as client:  # one client, one cookie session, per rollout
        client.post("/seed_session", json=body).raise_for_status()
        for item in row["response"]["output"]:
            if item["type"] == "function_call":
                try:
                    arguments = json.loads(item["arguments"])
                except ValueError:
                    continue  # NeMo Gym's agent answers the model itself and calls nothing
                client.post("/" + item["name"], json=arguments)
        verdict = client.post("/verify", json={**body, "response": row["response"]})
        verdict.raise_for_status()
    out.append([row["task_id"], row["_ng_rollout_index"], verdict.json()["reward"]])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def nemo_env() -> dict[str, str]:
    if not PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{PYTHON} missing: .ci/run installs nemo-gym==0.4.0 there")
        pytest.skip(f"no NeMo Gym venv at {VENV} (python3.12 -m venv; pip install nemo-gym==0.4.0)")
    site = next(VENV.glob("lib/python3*/site-packages"))
    return {"GYMFLOW_NEMO_GYM_PATH": str(site), "GYMFLOW_NEMO_GYM_VENV": str(VENV)}


def test_discovery_lists_and_finds_the_packages_servers(nemo_env, tmp_path: Path) -> None:
    listed = gym("list", "environments", "--json", cwd=tmp_path, env=nemo_env, check=True)
    by_name = {e["name"]: e for e in json.loads(listed.stdout)}
    mcqa = by_name["ng-mcqa"]
    assert "Multi-choice question answering" in mcqa["description"]
    assert mcqa["domain"] == "knowledge" and "nemo_gym" in mcqa["tags"]
    assert set(mcqa["splits"]) == {"example", "example_with_template_metadata"}
    session = by_name["ng-example_session_state_mgmt"]
    assert session["harness"] == "tool_loop"
    found = gym("search", "multi-choice question answering", "--json", cwd=tmp_path, env=nemo_env)
    best = [hit["name"] for hit in json.loads(found.stdout)[:2]]  # a tie with google_search's
    assert "ng-mcqa" in best, best


@pytest.mark.parametrize(
    ("server", "config", "instance"),
    [
        ("mcqa", "mcqa", "mcqa"),
        (
            "example_session_state_mgmt",
            "example_session_state_mgmt",
            "example_session_state_mgmt_resources_server",
        ),
    ],
)
def test_rewards_agree_with_nemo_gyms_own_verify(
    nemo_env, prefect_api: str, tmp_path: Path, server: str, config: str, instance: str
) -> None:
    env = {**nemo_env, "PREFECT_API_URL": prefect_api}
    name = f"ng-{server}"
    ran = gym("eval", "run", "--environment", name, "--repeats", "3", "--out", "run",
              cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    assert ran.returncode in (0, 2), ran.stdout + ran.stderr  # 2: a gate on the policy
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        stored = {
            (task, repeat): (status, reward)
            for task, repeat, status, reward in con.execute(
                "SELECT r.task_id, r.repeat_index, v.status, v.reward FROM rollouts r "
                "JOIN verifications v USING (rollout_id)"
            ).fetchall()
        }
    finally:
        con.close()
    assert len(stored) == 15 and all(status == "ok" for status, _ in stored.values())
    rewards = {reward for _, reward in stored.values()}
    assert rewards == {0.0, 1.0}, rewards  # recorded passes and failures both replayed

    gym("export", "run", "--format", "nemo-gym", "--out", "ng/rollouts.jsonl",
        cwd=tmp_path, env=env, check=True)  # fmt: skip
    site = Path(nemo_env["GYMFLOW_NEMO_GYM_PATH"])
    judged = subprocess.run(
        [str(PYTHON), "-c", JUDGE, str(SERVE_APP), str(site), server,
         str(site / f"resources_servers/{server}/configs/{config}.yaml"), instance,
         str(tmp_path / "ng/rollouts.jsonl")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert judged.returncode == 0, judged.stderr[-3000:]
    theirs = {(task, repeat): reward for task, repeat, reward in json.loads(judged.stdout)}
    assert theirs == {key: reward for key, (_, reward) in stored.items()}

    # NeMo Gym's own aggregation of the run, beside gymflow's profile
    metrics = json.loads((tmp_path / "run" / "nemo_gym_metrics.json").read_text())
    assert metrics["rollouts"] == 15
    mean = sum(reward for _, reward in stored.values()) / 15
    assert metrics["agent_metrics"]["mean/reward"] == pytest.approx(mean)

    # 0.4.0's servers do not say their verifier is stateless (no GET /reverify_mode)
    refused = gym("eval", "reverify", "run", cwd=tmp_path, env=env, timeout=300)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "reverify mode 'unknown'" in refused.stderr and "--force" in refused.stderr

    # the rest of the loop reads the run as any other
    diagnosed = gym("eval", "diagnose", "run", "--json", cwd=tmp_path, env=env, check=True)
    assert json.loads(diagnosed.stdout)["buckets"]
    assert (tmp_path / "run" / "report.html").stat().st_size > 10_000


def test_own_rows_on_a_running_server_through_a_benchmark(
    nemo_env, prefect_api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's dataset file and the URL of a NeMo Gym server already running: a benchmark
    names the file and the server (`verifier: nemo_gym`), the eval config the URL."""
    for name, value in nemo_env.items():
        monkeypatch.setenv(name, value)
    from gymflow.environments.nemo_gym.folder import nemo_servers
    from gymflow.environments.nemo_gym.launch import ServerProcess

    data = Path(nemo_env["GYMFLOW_NEMO_GYM_PATH"]) / "resources_servers/mcqa/data"
    (tmp_path / "mine/benchmarks").mkdir(parents=True)
    rows = data.joinpath("example.jsonl").read_text().splitlines()[:3]
    (tmp_path / "mine/rows.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "mine/rows_rollouts.jsonl").write_bytes(
        data.joinpath("example_rollouts.jsonl").read_bytes()
    )
    (tmp_path / "mine/benchmarks/my-mcqa.yaml").write_text(
        "name: my-mcqa\ndescription: three of mcqa's rows\nrepeats: 2\n"
        "dataset: {path: ../rows.jsonl, format: nemo_gym}\n"
        "verifier: {name: nemo_gym, params: {server: ng-mcqa}}\n"
    )
    server = ServerProcess(nemo_servers()["ng-mcqa"])
    url = server.start()
    try:
        (tmp_path / "eval.yaml").write_text(f"benchmark: my-mcqa\nout: run\nresources_url: {url}\n")
        env = {**nemo_env, "GYMFLOW_ENVIRONMENTS_PATH": str(tmp_path / "mine"),
               "PREFECT_API_URL": prefect_api}  # fmt: skip
        listed = gym("list", "benchmarks", "--json", cwd=tmp_path, env=env, check=True)
        assert "my-mcqa" in {b["name"] for b in json.loads(listed.stdout)}
        ran = gym("eval", "run", "eval.yaml", cwd=tmp_path, env=env, timeout=600)
    finally:
        server.stop()
    assert ran.returncode in (0, 2), ran.stdout + ran.stderr
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        verdicts = con.execute("SELECT status, reward FROM verifications").fetchall()
        (version,) = con.execute("SELECT benchmark_version FROM runs").fetchone()
    finally:
        con.close()
    assert len(verdicts) == 6 and {status for status, _ in verdicts} == {"ok"}
    assert {reward for _, reward in verdicts} <= {0.0, 1.0}
    assert "." in version  # the rows' (and the server's) part of the protocol


def test_a_server_whose_tools_are_served_over_mcp_runs_with_them(
    nemo_env, prefect_api: str, tmp_path: Path
) -> None:
    """example_mcp_weather's rows offer no tools: its agent (claude_code_agent) finds them over
    MCP (`tools/list` on `/mcp`) and calls them with the token its `/seed_session` hands out;
    its `/verify` reads the calls the session made. gymflow lists them, runs the server in a
    tool loop and calls them the same way: each call's output is the server's answer for the
    city asked, and a rollout that called for the right city and said the sentence scores 1
    (the simulated policy plays NeMo Gym's recorded pass on one task and a wrong city on the
    other)."""
    (tmp_path / "mcp.yaml").write_text(
        "environment: ng-example_mcp_weather\nlimit: 2\nrepeats: 1\nout: run\n"
    )
    env = {**nemo_env, "PREFECT_API_URL": prefect_api}
    listed = gym("list", "environments", "--json", cwd=tmp_path, env=nemo_env, check=True)
    (weather,) = [e for e in json.loads(listed.stdout) if e["name"] == "ng-example_mcp_weather"]
    assert weather["harness"] == "tool_loop"
    checked = gym("env", "validate", "mcp.yaml", cwd=tmp_path, env=env, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = gym("eval", "run", "mcp.yaml", cwd=tmp_path, env=env, timeout=600)
    assert ran.returncode in (0, 2), ran.stdout + ran.stderr
    with duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT r.trajectory_json, v.status, v.reward, v.details_json FROM rollouts r "
            "JOIN verifications v USING (rollout_id)"
        ).fetchall()
    assert len(rows) == 2
    for trajectory, status, reward, details in rows:
        items = json.loads(trajectory)
        (call,) = [i for i in items if i.get("type") == "function_call"]
        (output,) = [i for i in items if i.get("type") == "function_call_output"]
        city = json.loads(call["arguments"])["city"]
        assert output["output"] == f"The weather in {city} is sunny and 72 F."  # over MCP
        assert status == "ok", details
        seen = json.loads(details)["tool_call_seen"]  # the call reached the session's state
        assert seen == (f"for {city}," in items[0]["content"]), (city, details)
        assert reward == float(seen and json.loads(details)["final_response_mentions_weather"])
    assert {reward for _, _, reward, _ in rows} == {0.0, 1.0}
