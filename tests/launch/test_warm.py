"""The warm process, as a user meets it: `gym` commands forked from a process that imported
gymflow and Prefect once run exactly as they would in a process of their own (output, exit code,
store, signals), and a command it cannot run exactly so (another environment, changed code on
disk) runs in its own process instead."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gymflow import warm_protocol
from gymflow.cli import exit_codes
from gymflow.cli.local_prefect import STATE_FILE
from tests.conftest import GYM
from tests.faults.stores import one_error_line, orphans, query, rollout_rows
from tests.faults.test_run_control import EXPECTED, SLOW, Running

pytestmark = pytest.mark.prefect


@dataclass
class Warm:
    home: Path
    env: dict[str, str]
    process: subprocess.Popen

    def gym(self, *args: str, cwd: Path, env: dict[str, str] | None = None, **kwargs):
        return subprocess.run([GYM, *args], cwd=cwd, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=300, **kwargs)  # fmt: skip

    def log(self) -> str:
        return (self.home / warm_protocol.LOG_FILE).read_text()

    def served(self, args: str) -> bool:
        return f"served {args!r}" in self.log()

    def refused(self, args: str) -> str | None:
        for line in self.log().splitlines():
            if f"refused {args!r}: " in line:
                return line.split(f"refused {args!r}: ", 1)[1]
        return None


def _wait(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def start_warm(home: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start the warm process for `home` (as `gym server --start` does) and wait until it serves."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / warm_protocol.LOG_FILE).open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", warm_protocol.MODULE, "--home", str(home)],
            cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    state = home / warm_protocol.STATE_FILE
    _wait(state.exists, f"the warm process to serve ({home / warm_protocol.LOG_FILE})")
    assert json.loads(state.read_text())["pid"] == process.pid
    return process


def stop_warm(process: subprocess.Popen) -> None:
    process.terminate()
    assert process.wait(timeout=30) == 128 + signal.SIGTERM


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> Iterator[Warm]:
    """A warm process serving a PREFECT_HOME whose local Prefect server is the suite's (this
    test process stands in for its pid: the warm process ends when the server's pid does)."""
    home = tmp_path_factory.mktemp("warm-home")
    server = {"api_url": prefect_api, "pid": os.getpid(), "log": str(home / "server.log")}
    (home / STATE_FILE).write_text(json.dumps(server))
    env = _environment()
    envs = tmp_path_factory.mktemp("environments")  # empty until a test adds to it
    env |= {"PREFECT_HOME": str(home), "PYTHONUNBUFFERED": "1", "COLUMNS": "200",
            "GYMFLOW_ENVIRONMENTS_PATH": str(envs)}  # fmt: skip
    process = start_warm(home, env)
    yield Warm(home, env, process)
    stop_warm(process)


def _environment() -> dict[str, str]:
    """This process's environment, but not what pytest changes per test (PYTEST_CURRENT_TEST:
    a command with another value than the warm process has would run in its own process)."""
    drop = ("PYTEST_CURRENT_TEST", "PREFECT_API_URL")
    return {key: value for key, value in os.environ.items() if key not in drop}


def test_a_forked_run_is_the_run_its_own_process_makes(warm: Warm, tmp_path: Path):
    args = ("eval", "run", "--benchmark", "arithmetic-smoke", "--out")
    forked = warm.gym(*args, "forked", cwd=tmp_path)
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert warm.served("eval run --benchmark arithmetic-smoke --out forked"), warm.log()
    own = warm.gym(*args, "own", cwd=tmp_path, env={warm_protocol.MODE_ENV: "off"})
    assert own.returncode == 0, own.stdout + own.stderr
    assert "--out own" not in warm.log()  # GYMFLOW_WARM=off: never handed over

    def summary(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("report: ")]

    assert summary(forked.stdout) == summary(own.stdout)
    assert "health: healthy" in forked.stdout
    rows = rollout_rows(tmp_path / "forked" / "gymflow.duckdb")
    assert len(rows) == 200 and rows == rollout_rows(tmp_path / "own" / "gymflow.duckdb")


def test_errors_and_exit_codes_come_back_to_the_caller(warm: Warm, tmp_path: Path):
    (tmp_path / "bad.yaml").write_text("benchmark: arithmetic-smoke\nrepeats: -3\n")
    bad = warm.gym("eval", "run", "bad.yaml", cwd=tmp_path)
    assert warm.served("eval run bad.yaml"), warm.log()
    assert bad.returncode == exit_codes.BAD_INPUT, bad.stdout + bad.stderr
    assert "bad.yaml" in bad.stderr and "repeats" in bad.stderr
    assert not (tmp_path / "runs").exists()


def test_environments_added_after_it_started_are_found(warm: Warm, tmp_path: Path):
    """It read the environment folders when it started; each command reads them again."""
    before = warm.gym("list", "environments", cwd=tmp_path)
    assert before.returncode == 0 and "ledger" not in before.stdout
    envs = Path(warm.env["GYMFLOW_ENVIRONMENTS_PATH"])
    shutil.copytree(Path(__file__).parents[1] / "harness" / "envs" / "ledger", envs / "ledger")
    after = warm.gym("list", "environments", cwd=tmp_path)
    assert warm.log().count("served 'list environments'") == 2, warm.log()
    assert after.returncode == 0 and "ledger" in after.stdout, after.stdout


def test_a_command_in_another_environment_runs_in_its_own_process(warm: Warm, tmp_path: Path):
    result = warm.gym("list", "benchmarks", cwd=tmp_path, env={"GYMFLOW_SOMETHING": "1"})
    assert result.returncode == 0 and "arithmetic-smoke" in result.stdout
    assert warm.refused("list benchmarks") == "environment differs: GYMFLOW_SOMETHING"
    assert warm.process.poll() is None  # it goes on serving the commands it can
    # GYMFLOW_WARM is read by the `gym` script alone: `on` is no other environment
    warm.gym("search", "arithmetic", cwd=tmp_path, env={"GYMFLOW_WARM": "on"})
    assert warm.served("search arithmetic"), warm.log()
    # `nice` and `ulimit` apply to the command only in a process of its own
    niced = subprocess.run(["nice", "-n", "5", GYM, "list", "environments"], cwd=tmp_path,
                           env=warm.env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert niced.returncode == 0 and "arithmetic" in niced.stdout
    assert warm.refused("list environments") == "process differs: nice"
    limited = subprocess.run(["bash", "-c", f"ulimit -n 512 && {GYM} list --help"], cwd=tmp_path,
                             env=warm.env, capture_output=True, text=True)  # fmt: skip
    assert limited.returncode == 0 and "benchmarks" in limited.stdout
    assert warm.refused("list --help") == "process differs: RLIMIT_NOFILE", limited.stderr


def test_signals_reach_the_forked_run_and_a_gone_caller_stops_it(warm: Warm, tmp_path: Path):
    """SIGTERM to the caller stops the run as it stops one in its own process (exit 143, what
    finished is kept, --resume completes it); a caller killed outright (its terminal closed)
    gets its run stopped the same way."""
    out = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(SLOW.format(out=out))
    store = out / "gymflow.duckdb"

    run = Running(["eval", "run", str(config)], tmp_path, "", env=warm.env)
    run.wait_collecting()
    command = _only(lambda: _commands_of(warm.process.pid), "the forked command")
    run.process.send_signal(signal.SIGTSTP)  # Ctrl-Z stops the caller and its command
    _wait(lambda: _state(command) == "T", "the command to stop")
    # a shell continues a job it saw stopped: the caller stops itself after passing SIGSTOP on
    _wait(lambda: _state(run.process.pid) == "T", "the caller to stop")
    run.process.send_signal(signal.SIGCONT)  # `fg`
    _wait(lambda: _state(command) != "T", "the command to continue")
    run.process.send_signal(signal.SIGTERM)
    code, _, stderr = run.finish()
    assert code == exit_codes.TERMINATED, stderr
    assert warm.served(f"eval run {config}"), warm.log()
    line = one_error_line(stderr)
    assert "stopped by SIGTERM" in line and "--resume" in line, line
    stored = query(store, "SELECT count(*) FROM rollouts")[0][0]
    assert 0 < stored < EXPECTED and orphans(store) == 0

    resumed = Running(["eval", "run", str(config), "--resume"], tmp_path, "", env=warm.env)
    resumed.wait_collecting()
    resumed.process.kill()
    resumed.finish()
    ended = f"served 'eval run {config} --resume' in pid"
    _wait(lambda: ended in warm.log(), "the orphaned run to stop", timeout=180)
    assert "went away: SIGTERM" in warm.log()
    assert next(line for line in warm.log().splitlines() if ended in line).endswith(": exit 143")
    after = query(store, "SELECT count(*) FROM rollouts")[0][0]
    assert stored <= after < EXPECTED and orphans(store) == 0

    final = warm.gym("eval", "run", str(config), "--resume", cwd=tmp_path)
    assert final.returncode == 0, final.stdout + final.stderr
    assert "missing 0" in final.stdout and "health: healthy" in final.stdout
    assert query(store, "SELECT count(DISTINCT (task_id, repeat_index)), count(*) FROM rollouts")[
        0
    ] == (EXPECTED, EXPECTED)


def _children(pid: int) -> list[int]:
    """The live children of `pid` (not one that ended and waits to be reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            if int(parent) == pid and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def _commands_of(warm_pid: int) -> list[int]:
    """The commands a warm process runs: the children of its supervisors."""
    return [command for supervisor in _children(warm_pid) for command in _children(supervisor)]


def _only(find, what: str) -> int:
    """The one pid `find` returns, once it returns one (an earlier command may still be
    ending)."""
    found: list[int] = []

    def one() -> bool:
        found[:] = find()
        return len(found) == 1

    _wait(one, what)
    return found[0]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"  # gone


def test_changed_code_on_disk_ends_the_warm_process(prefect_api: str, tmp_path: Path):
    """A file it imported changed (an upgrade, an edit): the command runs in its own process and
    the warm process ends (a terminal's next run starts a fresh one). The file is a
    `sitecustomize` of this test's own (Python imports it at start): touching one of gymflow's
    would end every other test's warm process too."""
    home = tmp_path / "home"
    home.mkdir()
    server = {"api_url": prefect_api, "pid": os.getpid(), "log": "-"}
    (home / STATE_FILE).write_text(json.dumps(server))
    site = tmp_path / "site"
    site.mkdir()
    touched = site / "sitecustomize.py"
    touched.write_text("# imported by every Python this test starts\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = _environment() | {"PREFECT_HOME": str(home), "PYTHONPATH": path}
    process = start_warm(home, env)
    warm = Warm(home, env, process)
    try:
        first = warm.gym("list", "benchmarks", cwd=tmp_path)
        assert first.returncode == 0 and warm.served("list benchmarks"), warm.log()
        touched.write_text("# edited\n")
        result = warm.gym("list", "environments", cwd=tmp_path)
        assert result.returncode == 0 and "arithmetic" in result.stdout
        assert warm.refused("list environments") == f"{touched} changed on disk", warm.log()
        assert process.wait(timeout=30) == 0  # it ended by itself
        assert not (home / warm_protocol.STATE_FILE).exists()
    finally:
        if process.poll() is None:
            stop_warm(process)


def test_the_warm_process_is_given_the_environment_as_the_user_had_it(monkeypatch, tmp_path):
    """What gymflow sets before Prefect reads it (its defaults, an adopted server's address) is
    taken out again, and a variable the user had set, even to "", is given back as it was."""
    from gymflow.cli import local_prefect

    monkeypatch.setattr(local_prefect, "_set_here", {})
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.setenv("PREFECT_API_URL", "")
    monkeypatch.delenv("PREFECT_LOGGING_LEVEL", raising=False)
    server = {"api_url": "http://127.0.0.1:9/api", "pid": os.getpid(), "log": "-"}
    (tmp_path / STATE_FILE).write_text(json.dumps(server))
    before = dict(os.environ)
    local_prefect.configure()
    assert os.environ["PREFECT_API_URL"] == server["api_url"]
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "WARNING"
    assert local_prefect.users_env() == before


def test_a_caller_that_gave_up_waiting_runs_its_command_once(warm: Warm, tmp_path: Path):
    """Connections that send nothing hold the warm process past the caller's wait: the caller
    runs the command itself, and the warm process, reading its request later, must not start it
    as well (its output, or a second run into the same store)."""
    import socket

    from gymflow.launch.client import ANSWER_TIMEOUT_S
    from gymflow.launch.warm import REQUEST_TIMEOUT_S

    path = json.loads((warm.home / warm_protocol.STATE_FILE).read_text())["socket"]
    held = int(ANSWER_TIMEOUT_S / REQUEST_TIMEOUT_S) + 2
    silent = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(held)]
    try:
        for conn in silent:
            conn.connect(path)
        result = warm.gym("list", "benchmarks", cwd=tmp_path)
        ended = "the caller of 'list benchmarks' stopped waiting"
        _wait(lambda: ended in warm.log(), "the warm process to read the request")
    finally:
        for conn in silent:
            conn.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("arithmetic-smoke ") == 1, result.stdout
    assert not warm.served("list benchmarks"), warm.log()


def test_a_closed_stdout_stays_closed(warm: Warm, tmp_path: Path):
    """`gym ... >&-`: the caller's connection would take fd 1 and be handed over as the
    command's stdout (its output read as messages, a traceback, exit 1)."""
    closed = subprocess.run([GYM, "list", "--help"], cwd=tmp_path, env=warm.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            timeout=300, preexec_fn=lambda: os.close(1))  # fmt: skip
    assert closed.returncode == 0 and closed.stderr == "", closed.stderr


def test_usage_names_the_gym_command(warm: Warm, tmp_path: Path):
    forked = warm.gym("eval", "run", "--no-such-option", cwd=tmp_path)
    assert warm.served("eval run --no-such-option"), warm.log()
    own = warm.gym("eval", "run", "--no-such-option", cwd=tmp_path,
                   env={warm_protocol.MODE_ENV: "off"})  # fmt: skip
    assert forked.returncode == own.returncode == exit_codes.BAD_INPUT
    assert forked.stderr == own.stderr and "Usage: gym eval run" in forked.stderr, forked.stderr


def test_a_nohup_run_survives_its_terminal_closing(warm: Warm, tmp_path: Path):
    """`nohup gym eval run ...`: the caller ignores SIGHUP, and so must the command it hands over
    (a hangup passed on ended the run, exit 129)."""
    config = tmp_path / "run.yaml"
    config.write_text(SLOW.format(out=tmp_path / "run").replace("repeats: 20", "repeats: 8"))
    caller = subprocess.Popen(["nohup", GYM, "eval", "run", str(config)], cwd=tmp_path,
                              env=warm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)  # fmt: skip
    _wait(lambda: _commands_of(warm.process.pid), "the command to start")
    caller.send_signal(signal.SIGHUP)
    output, _ = caller.communicate(timeout=300)
    assert caller.returncode == 0, output
    assert "health: healthy" in output and warm.served(f"eval run {config}"), warm.log()


def test_a_command_killed_by_a_signal_kills_its_caller_so(warm: Warm, tmp_path: Path):
    """An OOM kill of the forked command: its caller ends as the command in its own process
    would, killed by SIGKILL (returncode -9), not with an exit code of 137."""
    config = tmp_path / "run.yaml"
    config.write_text(SLOW.format(out=tmp_path / "run"))
    caller = subprocess.Popen([GYM, "eval", "run", str(config)], cwd=tmp_path, env=warm.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    command = _only(lambda: _commands_of(warm.process.pid), "the command to start")
    os.kill(command, signal.SIGKILL)
    _, stderr = caller.communicate(timeout=300)
    assert caller.returncode == -signal.SIGKILL, stderr
    assert warm.served(f"eval run {config}"), warm.log()


def test_a_request_of_the_wrong_shape_leaves_it_serving(warm: Warm, tmp_path: Path):
    """Not JSON, or JSON with a field of the wrong type: dropped, with the descriptors it came
    with (a kept pipe's write end would leave its reader waiting for EOF), and the warm process
    goes on serving (a `path` of null ended it)."""
    import socket

    path = json.loads((warm.home / warm_protocol.STATE_FILE).read_text())["socket"]
    fds = Path(f"/proc/{warm.process.pid}/fd")
    request = {"argv": ["gym"], "cwd": str(tmp_path), "env": {}, "executable": sys.executable,
               "path": None, "umask": 0o22, "context": {}}  # fmt: skip
    for payload in (b"not json\n", json.dumps(request).encode() + b"\n"):
        read, write = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            socket.send_fds(conn, [payload], [read, write, write])
            os.close(read)
            os.close(write)
            conn.settimeout(30)
            assert conn.recv(100) == b""  # dropped: closed without an answer
    assert warm.process.poll() is None, warm.log()
    kept = [os.readlink(fd) for fd in fds.iterdir()]
    assert not [name for name in kept if name.startswith("pipe:")], kept
    result = warm.gym("list", "benchmarks", cwd=tmp_path)
    assert result.returncode == 0 and warm.served("list benchmarks"), warm.log()


def test_a_command_with_fewer_privileges_runs_in_its_own_process(warm: Warm, tmp_path: Path):
    """`setpriv --no-new-privs gym ...` (or dropped capabilities, a seccomp filter) and `choom`:
    forked from the warm process, the command would have run with its privileges and its
    standing with the OOM killer, not its caller's."""
    for wrapper, args, why in (
        (["setpriv", "--no-new-privs"], ("list", "benchmarks", "--help"), "privileges"),
        (["choom", "-n", "500", "--"], ("list", "environments", "--help"), "oom_score_adj"),
    ):
        result = subprocess.run([*wrapper, GYM, *args], cwd=tmp_path, env=warm.env,
                                capture_output=True, text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0 and "Usage: gym list" in result.stdout, result.stderr
        assert warm.refused(" ".join(args)) == f"process differs: {why}", warm.log()


def test_a_command_whose_supervisor_is_killed_stops(warm: Warm, tmp_path: Path):
    """The supervisor killed (`kill -9`, the OOM killer): the caller says the command was lost
    and exits 3, and the command stops as on SIGTERM (what finished is kept) instead of going on
    unseen in the caller's terminal."""
    config = tmp_path / "run.yaml"
    config.write_text(SLOW.format(out=tmp_path / "run"))
    with (tmp_path / "stderr").open("w") as stderr:
        caller = subprocess.Popen([GYM, "eval", "run", str(config)], cwd=tmp_path, env=warm.env,
                                  stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    store = tmp_path / "run" / "gymflow.duckdb"
    _wait(store.exists, "the run to start")
    supervisor = _only(lambda: _children(warm.process.pid), "the command's supervisor")
    command = _only(lambda: _children(supervisor), "the forked command")
    os.kill(supervisor, signal.SIGKILL)
    assert caller.wait(timeout=300) == exit_codes.RUNTIME
    assert "lost this command" in (tmp_path / "stderr").read_text()

    def ended() -> bool:
        try:
            return _state(command) in ("Z", "X")
        except OSError:
            return True

    _wait(ended, "the command to stop")
    assert query(store, "SELECT count(*) FROM rollouts")[0][0] < EXPECTED and orphans(store) == 0
