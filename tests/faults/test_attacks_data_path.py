"""What a benchmark found only on the data path may choose, and what a child process is given
(attack pass 8, F2 and F4).

The data path (`GYMFLOW_BENCHMARKS_PATH`: a selection `gym data select` wrote into a run folder,
which whoever can write the folder also fills) was read by a deny-list: no `task_code` verifier,
no server URL. It let through a harness `module:attr`, imported in gymflow's own process (F2),
and `verifier: nemo_gym` naming NeMo Gym's bigcodebench server, which runs each row's test code
on the host, in a process started with gymflow's whole environment: API keys and seal key (F4).
Now such a file may set only the fields its model marks as data and choose only components their
registry holds `for_data`; every child gymflow starts outside a sandbox gets an environment built
from an allow-list (`gymflow.core.processes.child_env`)."""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest

import gymflow
from gymflow.environments.benchmark import Benchmark
from gymflow.environments.registry import BENCHMARKS_VARIABLE
from tests.conftest import gym
from tests.faults.stores import run_gym

SRC = Path(gymflow.__file__).resolve().parent  # the gymflow under test, wherever it is
NEMO_VENV = Path(os.environ.get("GYMFLOW_NEMO_GYM_VENV", "/tmp/nemo-gym-venv"))
#: What the owner's shell holds that no child gymflow starts for a server or tool asked for.
SECRETS = {
    "OPENAI_API_KEY": "sk-victim-secret-123",
    "AWS_SECRET_ACCESS_KEY": "aws-victim-secret",
    "HF_TOKEN": "hf_victimtoken",
    "GYMFLOW_SEAL_KEY": "00" * 32,
}


def _selection(tmp_path: Path, yaml_text: str, rows: str) -> Path:
    """A selection in a run folder (`RUN/data/benchmarks/sel.yaml`), as its writer left it."""
    benchmarks = tmp_path / "run" / "data" / "benchmarks"
    benchmarks.mkdir(parents=True)
    (benchmarks / "sel.jsonl").write_text(rows)
    (benchmarks / "sel.yaml").write_text(yaml_text)
    return benchmarks / "sel.yaml"


def test_a_data_path_harness_import_path_is_refused_not_imported(
    tmp_path: Path, prefect_api: str
) -> None:
    """F2: `dataset.harness: "module:attr"` named a module gymflow imported in its own process
    (any module on a sys.path entry the folder's writer can reach; here one beside the run)."""
    lib, marker = tmp_path / "lib", tmp_path / "pwned"
    lib.mkdir()
    (lib / "pwn_harness.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported as the owner')\n"
        "run = None\n"  # no harness: the import is the attack
    )
    selection = _selection(
        tmp_path,
        "name: sel\ndataset:\n  path: sel.jsonl\n  harness: 'pwn_harness:run'\n"
        "  fields: {prompt: [question], verifier: [answer]}\nverifier:\n  name: exact_match\n"
        "prompt_template: '{{ question }}'\n",
        '{"question": "1+1?", "answer": "2"}\n',
    )
    env = {
        BENCHMARKS_VARIABLE: str(selection.parent.parent),
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(lib)])),
    }
    ran = run_gym("eval", "run", "--benchmark", "sel", "--out", str(tmp_path / "again"),
                  cwd=tmp_path, prefect_api=prefect_api, env=env)  # fmt: skip
    out = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode != 0 and not marker.exists(), out
    assert f"{selection}: dataset.harness: 'pwn_harness:run' is not a harness" in out
    validated = gym("env", "validate", str(selection), cwd=tmp_path, env=env)
    assert "dataset.harness: 'pwn_harness:run'" in " ".join(validated.stdout.split())
    assert validated.returncode != 0 and not marker.exists()


def test_a_data_path_benchmark_cannot_choose_a_nemo_gym_server(
    tmp_path: Path, prefect_api: str
) -> None:
    """F4: `verifier: nemo_gym` with `server: ng-bigcodebench` started NeMo Gym's server over
    the file's rows, whose `verifier_metadata.test` that server runs on the host. Refused from
    the data path, naming the file and the field, before any server starts; so is naming the
    server as the environment."""
    marker = tmp_path / "pwned"
    test = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran as the owner')\n"
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "write f"}]},
        "verifier_metadata": {"task_id": "x/1", "test": test, "entry_point": "f"},
    }
    selection = _selection(
        tmp_path,
        "name: sel\ndataset:\n  path: sel.jsonl\n  format: nemo_gym\n"
        "verifier:\n  name: nemo_gym\n  params:\n    server: ng-bigcodebench\nrepeats: 1\n",
        json.dumps(row) + "\n",
    )
    env = {BENCHMARKS_VARIABLE: str(selection.parent.parent), **SECRETS}
    site = next(NEMO_VENV.glob("lib/python3*/site-packages"), None)
    if site is not None:  # as the docs tell NeMo Gym users: its servers are then found
        env |= {"GYMFLOW_NEMO_GYM_PATH": str(site), "GYMFLOW_NEMO_GYM_VENV": str(NEMO_VENV)}
    ran = run_gym("eval", "run", "--benchmark", "sel", "--out", str(tmp_path / "again"),
                  cwd=tmp_path, prefect_api=prefect_api, env=env)  # fmt: skip
    out = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode != 0 and not marker.exists(), out
    assert f"{selection}: verifier.name: 'nemo_gym' is not a verifier" in out, out
    assert "NeMo Gym server" not in out and not (tmp_path / "again" / "gymflow.duckdb").exists()

    selection.write_text("name: sel\nenvironment: ng-bigcodebench\n")
    validated = gym("env", "validate", str(selection), cwd=tmp_path, env=env)
    printed = " ".join(validated.stdout.split())
    assert "environment: 'ng-bigcodebench' is not an environment" in printed, printed


def test_every_field_a_data_file_may_set_is_marked_and_every_choice_has_a_registry() -> None:
    """The allow-list is the models' own markers: a benchmark that sets every data field and
    chooses a `for_data` verifier and harness passes; code_exec, math_judge, nemo_gym, a
    `module:attr` harness and the `command` harness are each refused, naming the field."""
    from gymflow.environments.registry import beyond_data

    data = {
        "name": "sel",
        "description": "d",
        "dataset": {
            "path": "rows.jsonl",
            "split": "test",
            "harness": "tool_loop",
            "domain": "math",
            "pass_threshold": 1.0,
            "fields": {"id": "id", "prompt": ["q"], "verifier": ["answer"], "tags": "t"},
        },
        "verifier": {"name": "numeric_match", "params": {}},
        "split": "test",
        "limit": 3,
        "prompt_template": "{{ q }}",
        "repeats": 2,
        "sampling": {"temperature": 0.0, "seed": 1},
        "tags": ["selection"],
    }
    assert beyond_data(data, Benchmark.model_validate(data)) is None
    for field, value in [
        ("verifier", {"name": "code_exec"}),
        ("verifier", {"name": "math_judge"}),
        ("verifier", {"name": "nemo_gym", "params": {"server": "ng-bigcodebench"}}),
        ("dataset", {**data["dataset"], "harness": "this:s"}),
        ("dataset", {**data["dataset"], "harness": "command"}),
    ]:
        changed = {**data, field: value}
        refused = beyond_data(changed, Benchmark.model_validate(changed))
        assert refused is not None and refused.startswith(f"{field}."), refused


def test_a_child_process_environment_holds_no_key_the_user_did_not_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """F4's second half: the server process had gymflow's whole environment. `child_env` gives
    what a program needs, the settings its caller names by prefix without a credential word,
    and a variable the user lists in GYMFLOW_CHILD_ENV; never the seal key, even listed."""
    from gymflow.core.processes import child_env

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HOME", "/tmp/hf")
    monkeypatch.setenv("MY_SERVER_TOKEN", "mine")
    env = child_env(prefixes=("HF_", "GYMFLOW_"))
    assert not set(SECRETS) & set(env) and env["HF_HOME"] == "/tmp/hf", sorted(env)
    assert env["PATH"] == os.environ["PATH"] and "MY_SERVER_TOKEN" not in env
    monkeypatch.setenv("GYMFLOW_CHILD_ENV", "MY_SERVER_TOKEN, GYMFLOW_SEAL_KEY")
    env = child_env(prefixes=("HF_",))
    assert env["MY_SERVER_TOKEN"] == "mine" and "GYMFLOW_SEAL_KEY" not in env


def _environ(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with, once it runs its own command: read while
    it is still this process's fork, or inside its `execve` (the new image's environment not yet
    laid out), /proc shows ours or nothing (a CI run at load 14 read nothing)."""
    ours, deadline = Path("/proc/self/cmdline").read_bytes(), time.monotonic() + 30
    while Path(f"/proc/{pid}/cmdline").read_bytes() in (b"", ours):
        assert time.monotonic() < deadline, f"process {pid} did not start its command in 30 s"
        time.sleep(0.01)
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    pairs = [item.partition("=") for item in raw if item]
    return {name: value for name, _, value in pairs}


def test_a_started_server_and_worker_see_no_key_the_user_did_not_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the processes gymflow starts actually hold, read from /proc: the local policy
    server and a verifier worker (a NeMo Gym server: below, where NeMo Gym is installed)."""
    from gymflow.simulated.local_server import LocalPolicyServer
    from gymflow.verifiers.pool import _Worker

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    with LocalPolicyServer({}, seed=0) as policy:
        assert policy._process is not None
        seen = _environ(policy._process.pid)
    assert not set(SECRETS) & set(seen) and "PATH" in seen, sorted(seen)
    worker = _Worker.start()
    try:
        seen = _environ(worker.process.pid)
    finally:
        worker.process.kill()
        worker.process.wait()
    assert not set(SECRETS) & set(seen) and "PYTHONPATH" in seen, sorted(seen)


def test_a_nemo_gym_server_sees_no_key_the_user_did_not_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site = next(NEMO_VENV.glob("lib/python3*/site-packages"), None)
    if site is None:
        pytest.skip(f"no NeMo Gym venv at {NEMO_VENV}")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GYMFLOW_NEMO_GYM_PATH", str(site))
    monkeypatch.setenv("GYMFLOW_NEMO_GYM_VENV", str(NEMO_VENV))
    from gymflow.environments.nemo_gym.folder import nemo_servers
    from gymflow.environments.nemo_gym.launch import ServerProcess

    server = ServerProcess(nemo_servers()["ng-mcqa"])
    server.start()
    try:
        assert server._process is not None
        seen = _environ(server._process.pid)
    finally:
        server.stop()
    assert not set(SECRETS) & set(seen) and seen["HF_HUB_OFFLINE"] == "1", sorted(seen)


#: Where a child is started inside the sandbox, not by gymflow on the host: the model bridge
#: runs in the sandbox's own (cleared) environment and cannot import gymflow.
INSIDE_SANDBOX = {"sandboxes/model_bridge.py"}
LAUNCHES = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "os": {"system", "popen", "execv", "execve", "execvp", "spawnv", "posix_spawn"},
}


def test_every_child_process_gets_an_environment_from_child_env() -> None:
    """Each process launch in src/gymflow passes `env=child_env(...)` (or a helper returning
    it): a launch without `env=` inherits everything, as NeMo Gym's server did."""
    unbuilt = []
    for path in sorted(SRC.rglob("*.py")):
        relative = str(path.relative_to(SRC))
        if relative in INSIDE_SANDBOX or relative.startswith("builtin/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            module = owner.id if isinstance(owner, ast.Name) else ""
            if node.func.attr not in LAUNCHES.get(module, ()):
                continue
            env = next((k.value for k in node.keywords if k.arg == "env"), None)
            if env is None or "child_env" not in ast.unparse(env) + _helper_body(path, env):
                unbuilt.append(f"{relative}:{node.lineno}")
    assert not unbuilt, f"launched without child_env: {unbuilt}"


def _helper_body(path: Path, env: ast.expr) -> str:
    """The source of the module's function or the assignment `env` calls or names (a helper
    such as `_server_env()`, a local `env = child_env(...)`)."""
    name = env.func.id if isinstance(env, ast.Call) and isinstance(env.func, ast.Name) else None
    name = name or (env.id if isinstance(env, ast.Name) else None)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            found.append(ast.unparse(node))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            found.append(ast.unparse(node.value))
    return "".join(found)
