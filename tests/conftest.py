"""Shared fixtures: `gym` as a subprocess, and one Prefect server for every `gym eval run` of the
suite (tests/flows, which runs flows in this process, has its own session-scoped harness)."""

from __future__ import annotations

import compileall
import contextlib
import fnmatch
import io
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import reaper

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gymflow"
# The console script pip installed beside this interpreter: exactly what a user runs.
GYM = str(Path(sys.executable).parent / "gym")
PREFECT = str(Path(sys.executable).parent / "prefect")
PREFECT_STARTUP_TIMEOUT_S = 180


def gym(
    *args: str,
    cwd: Path,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the `gym` CLI as a user would: a subprocess, its output captured."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    result = subprocess.run(
        [GYM, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"gym {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def gym_in_process(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`gym` run in this process, for a command whose process adds nothing to what a test
    checks (a read of a stored run): `gymflow.cli.main` with the same command line, folder and
    environment, its output and exit code returned as `gym` returns them, without a Python
    start-up and gymflow's imports per call. Keep `gym` where the process is the point: signals,
    exit on a dead server, secrets in its environment, Prefect, a command that caches what the
    environment names (the registry reads GYMFLOW_ENVIRONMENTS_PATH once per process)."""
    from gymflow.cli import app as cli_app
    from gymflow.cli import local_prefect, main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    os.environ.update({"COLUMNS": "200", **(env or {})})
    # the width a `gym` process's consoles take from COLUMNS when they are made
    width = int(os.environ["COLUMNS"])
    local_prefect.configure()  # what importing gymflow.cli.app does in a fresh `gym`
    widths = {c: c._width for c in (cli_app.console, cli_app.errors)}
    os.chdir(cwd)
    sys.argv = [GYM, *args]
    try:
        for console in widths:
            console.width = width
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for console, width in widths.items():
            console._width = width
    result = subprocess.CompletedProcess([GYM, *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(
            f"gym {' '.join(args)} exited {code}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def require_tool(name: str) -> str:
    """A system tool the test needs: skipped locally when absent, a failure in CI."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} is not installed")
    return path


#: Test files that share a session fixture costing a run or a server: under `pytest -n 2 --dist
#: loadgroup` (the test command) each group runs on one worker, so its fixture is built once;
#: every other file is a group of its own (its module fixtures are built once too).
SHARED_FIXTURE_GROUPS = {
    "tests/data/test_trajectories.py": "ledger_run",
    "tests/harness/test_tool_loop_cli.py": "ledger_run",
    "tests/interop/test_atif.py": "ledger_run",
    "tests/flows/test_ui.py": "deployment",
    "tests/flows/test_work_pool.py": "deployment",
    "tests/flows/test_ui_runs.py": "deployment",
    "tests/flows/test_shards.py": "flows-harness",
    "tests/flows/test_sharded_on_s3.py": "flows-harness",
    "tests/flows/test_nightly.py": "flows-harness",
    "tests/flows/test_batch_retries.py": "flows-harness",
    "tests/flows/test_run_states.py": "flows-harness",
}


def pytest_configure(config: pytest.Config) -> None:
    """Before the run starts anything (xdist's workers included), mark its environment and start
    the reaper (tests/reaper.py) that stops whatever the run leaves behind when it ends, however
    it ends. A worker inherits its controller's mark and reaper."""
    if hasattr(config, "workerinput"):
        return
    if hasattr(config.option, "loadscopereorder"):
        # xdist would hand groups out by their number of tests, most first, whatever they cost
        # (a file of one 3-minute test last); the collection's order is the cost's
        # (`_longest_first`)
        config.option.loadscopereorder = False
    if sys.dont_write_bytecode:
        # PYTHONDONTWRITEBYTECODE (set in this machine's environment): Python then never caches
        # gymflow's editable sources, so each of the run's ~600 `gym`, bench and helper
        # processes compiled every gymflow module it imported (about 0.5 s of a `gym eval run`'s
        # 5.5 s). Compiled once here, where Python would have cached them, every process reads
        # them: its modules only, not the Python files its benchmarks ship as data (a task's
        # workspace, its checks), which no gymflow process imports.
        for source in PACKAGE.rglob("*.py"):
            if _importable(source):
                compileall.compile_file(source, quiet=1)
    token = secrets.token_hex(8)
    os.environ[reaper.VARIABLE] = token
    subprocess.Popen(
        [sys.executable, reaper.__file__, str(os.getpid()), token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # out of reach of the terminal's Ctrl-C and of a killed group
    )


def _importable(source: Path) -> bool:
    """Whether `source` is a module of gymflow's packages: every folder from it up to
    src/gymflow a package."""
    folders = source.relative_to(PACKAGE).parents
    return all((PACKAGE / folder / "__init__.py").is_file() for folder in folders)


#: What a test costs, in rough seconds, by the costliest thing it uses, for the order in which
#: groups are handed out (`_longest_first`): a run of a real model a minute or so (SmolLM2's
#: server, or Gemma's in tests/real_model/test_chat_templates.py), a run through a Prefect
#: server half that, and so does a test marked `prefect` that starts a server of its own
#: (tests/flows/test_hosts.py took 177 s, test_local_server.py 64 s, where 10 s had them handed
#: out among the last groups); another slow test several seconds, a fast one a fraction of one.
#: Magnitudes, not measurements: the order needs only the long groups ahead of the short ones.
COSTLY_FIXTURES_S = {
    "llama_server": 60.0,
    "gemma_server": 60.0,
    "prefect_api": 30.0,
    "deployment": 30.0,
}
PREFECT_S, SLOW_S, FAST_S = 30.0, 10.0, 0.5

#: The slow tier, decided here by where a test sits and what it needs, not by a decorator on
#: each: `pytest -m "not slow"` is the fast tier. Paths (fnmatch patterns, with what one of
#: their tests costs) whose every test runs Prefect flows or a real model, or replays an attack
#: pass end to end: tests/faults/test_attacks_*.py build hostile stores, seal them and read
#: them with several commands, about a second a test but 544 of the fast tier's 1,033
#: test-seconds; every module they reach, the rest of the tier imports too
#: (bench/fast_tier_modules.py). Markers of what a test opens (a Prefect flow, headless
#: Chromium); fixtures that start a process costing seconds before the test begins (a Prefect
#: server and `gym eval run` through it, a deployed work pool, third-party servers in venvs of
#: their own).
SLOW_PATHS = {
    "tests/flows/*": SLOW_S,
    "tests/real_model/*": SLOW_S,
    "tests/faults/test_attacks_*": 1.0,
}
SLOW_MARKERS = ("prefect", "browser")
SLOW_FIXTURES = (
    "prefect_api",
    "deployment",
    "served_model",
    "llama_server",
    "s3",
    # NeMo Gym's interpreter (tests/interop/test_nemo_gym_*.py) and LiteLLM's proxy
    # (tests/models/test_litellm_contract.py), each from a venv of its own
    "nemo",
    "nemo_env",
    "proxy",
)


def _slow_path(where: str) -> str | None:
    """The slow tier's pattern `where` (a path under ROOT, POSIX) matches, or None."""
    return next((p for p in SLOW_PATHS if fnmatch.fnmatchcase(where, p)), None)


def slow_because(item: pytest.Item) -> str | None:
    """Why `item` belongs to the slow tier (a path, a marker or a fixture), or None."""
    if (pattern := _slow_path(item.path.relative_to(ROOT).as_posix())) is not None:
        return f"in {pattern}"
    for name in SLOW_MARKERS:
        if item.get_closest_marker(name) is not None:
            return f"marked {name}"
    for name in SLOW_FIXTURES:
        if name in getattr(item, "fixturenames", ()):
            return f"uses {name}"
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under the fast tier's own expression (`-m "not slow"`) the slow paths are not even
    imported: tests/flows' conftest imports Prefect's test server, the costliest import of the
    collection. Any other expression collects them and deselects by marker."""
    if " ".join(config.getoption("markexpr", "").split()) != "not slow":
        return None
    path = collection_path.resolve()
    if not path.is_relative_to(ROOT):
        return None
    return True if _slow_path(path.relative_to(ROOT).as_posix() + "/") else None


def estimated_s(item: pytest.Item) -> float:
    used = getattr(item, "fixturenames", ())
    for fixture, seconds in COSTLY_FIXTURES_S.items():
        if fixture in used:
            return seconds
    if item.get_closest_marker("prefect"):
        return PREFECT_S
    if (pattern := _slow_path(item.path.relative_to(ROOT).as_posix())) is not None:
        return SLOW_PATHS[pattern]
    return SLOW_S if item.get_closest_marker("slow") else FAST_S


def xdist_group(item: pytest.Item) -> str:
    """The group `item` runs in under `--dist loadgroup`: its file's, or the shared one."""
    path = item.path.relative_to(ROOT).as_posix()
    group = SHARED_FIXTURE_GROUPS.get(path)
    if group is None:
        group = "reports" if path.startswith("tests/reports/") else path
    return group


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with each group's tests together, the groups in order of their estimated cost,
    longest first (each group's own tests in collection order). With two workers taking the
    next group as they free up, the long groups run while the many short ones still fill in
    behind them, and the run does not end with one long group on one worker while the other
    idles."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(xdist_group(item), []).append(item)
    cost = {name: sum(estimated_s(item) for item in group) for name, group in groups.items()}
    return [item for name in sorted(groups, key=lambda n: -cost[n]) for item in groups[name]]


# First: xdist's worker reads each item's `xdist_group` mark in its own hook of this name to put
# the group in the node id, and a conftest's hook runs after a plugin registered later (the
# worker's), so marks added at the default place came too late: every group was split across
# the workers (each started its own model servers and deployment, and ran plans twice).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and slow_because(item) is not None:
            item.add_marker(pytest.mark.slow)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    items[:] = _longest_first(items)


@pytest.fixture(autouse=True, scope="session")
def _isolated_prefect_home(tmp_path_factory: pytest.TempPathFactory):
    """Never write into a real ~/.prefect, and keep Prefect quiet and offline."""
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ["PREFECT_HOME"] = str(home)
    # The seal key (store/seal.py) of every test and `gym` subprocess: made on first use in a
    # config folder of the session's, never the user's.
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config-home"))
    os.environ.pop("GYMFLOW_SEAL_KEY", None)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # A fresh PREFECT_HOME runs migrations; on a loaded 2-core machine that can outlast the
    # default 20 s the ephemeral API server is given to start.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    yield


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API URL of one Prefect server for the suite's `gym eval run` subprocesses (pass it as
    PREFECT_API_URL), started on first use and stopped at the end of the session.

    Without it each `gym eval run` starts its own ephemeral server (about 10 s, far more on a busy
    machine); with it a small run takes about 2.5 s. test_demo.py keeps the ephemeral path, and
    tests/flows/test_local_server.py `gym server --start`. While iterating, point
    GYMFLOW_TEST_PREFECT_API at a server you run to skip the start-up."""
    if os.environ.get("GYMFLOW_TEST_PREFECT_API"):
        yield os.environ["GYMFLOW_TEST_PREFECT_API"]
        return
    home = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
    }
    log = (home / "server.log").open("wb")
    command = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--no-services", "--no-ui", "--analytics-off"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so stopping it stops its children
    )
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + PREFECT_STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"prefect server exited:\n{(home / 'server.log').read_text()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"prefect server not healthy within {PREFECT_STARTUP_TIMEOUT_S}s")
            time.sleep(0.25)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


LEDGER_KEY_VAR = "GYMFLOW_TEST_MODEL_KEY"
LEDGER_CONFIG = f"""
environment: ledger
repeats: 4
out: runs/ledger
harness: {{name: tool_loop, max_turns: 3}}
sampling: {{reasoning_effort: low, seed: 1}}
model:
  api_key_env: {LEDGER_KEY_VAR}
  backoff_s: 0.0
  faults: {{rate_429: 0.05, rate_reset: 0.05}}
"""


@dataclass(frozen=True)
class LedgerRun:
    cwd: Path  # where `gym eval run eval.yaml` ran
    run_dir: Path
    key: str  # the API key the run was given, which must be stored nowhere
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def ledger_run(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> LedgerRun:
    """One `gym eval run` of the multi-turn `ledger` environment (tests/harness/envs) with the
    tool loop, injected 429s and resets, reasoning and an API key: the tool-loop CLI tests and
    the trajectory export tests read the same run."""
    from tests.harness.conftest import ENVS

    cwd = tmp_path_factory.mktemp("ledger-run")
    (cwd / "eval.yaml").write_text(LEDGER_CONFIG)
    key = f"sk-gymflow-{secrets.token_hex(16)}"
    env = {
        "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS),
        LEDGER_KEY_VAR: key,
        "PREFECT_API_URL": prefect_api,
    }
    result = gym("eval", "run", "eval.yaml", cwd=cwd, env=env, check=True)
    return LedgerRun(cwd=cwd, run_dir=cwd / "runs" / "ledger", key=key, result=result)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory):
    """SeaweedFS's S3 gateway on 127.0.0.1 (tests/storage.py), its AWS_* variables exported in
    this process for the session, as a user's shell would."""
    from tests.storage import exported, seaweed

    with seaweed(tmp_path_factory.mktemp("seaweedfs")) as store, exported(store):
        yield store


@pytest.fixture
def host_folder() -> Iterator[Path]:
    """A folder outside /tmp (which every sandbox replaces with its own), open to every user as a
    home folder on Debian is: where the owner's files live in a sandbox test."""
    if not os.access("/var/tmp", os.W_OK):
        pytest.skip("no writable /var/tmp")
    folder = Path(tempfile.mkdtemp(prefix="gymflow-test-host-", dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
