"""The code sandbox under attack: each attack ends as a failed verification with a reason, and the
host (this test process, files it owns, its process table) is unharmed."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from gymflow.core.statuses import VERIFIED, VERIFY_ERROR
from gymflow.environments.registry import load_environment
from gymflow.environments.verifier_ref import VerifierRef
from gymflow.verifiers import pool, sandbox_host
from gymflow.verifiers.base import VerifierError, VerifyInput, get_verifier
from gymflow.verifiers.sandbox import Sandbox, SandboxLimits
from tests.conftest import require_tool


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_tool("bwrap")


@pytest.fixture(scope="module")
def task():
    return load_environment("humaneval").tasks("test")[0]  # has_close_elements


def attack(task, body: str, **params) -> tuple[float, dict]:
    """Verify a HumanEval answer whose function body is `body` (indented here)."""
    spec = get_verifier("code_exec")
    indented = "\n".join(f"    {line}" for line in body.strip().splitlines())
    answer = f"```python\n{task.data['prompt']}{indented}\n```"
    verdict = spec.fn(VerifyInput(task, answer), spec.params({"timeout_s": 3.0, **params}))
    return verdict.reward, verdict.details


def sandbox_processes(owner: int | None = None) -> list[int]:
    """Processes left running under the sandbox user ids that process `owner` (by default this
    one) hands out: other test runs on a shared machine have sandboxes of their own."""
    low = sandbox_host.UID_BASE + ((owner or os.getpid()) % 4096) * sandbox_host.SLOT_SPAN
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = next(
                int(line.split()[1])
                for line in status.read_text().splitlines()
                if line.startswith("Uid:")
            )
        except (OSError, StopIteration, ValueError):
            continue
        if low <= uid < low + sandbox_host.SLOT_SPAN:
            found.append(int(status.parent.name))
    return found


def no_sandbox_processes_left(owner: int | None = None) -> bool:
    deadline = time.monotonic() + 5
    while sandbox_processes(owner):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_infinite_loop_times_out(task) -> None:
    started = time.monotonic()
    reward, details = attack(task, "while True:\n    pass", timeout_s=1.0)
    assert (reward, details["reason"]) == (0.0, "timeout")
    assert details["limit"] in {"wall_clock", "cpu"}
    assert time.monotonic() - started < 30  # killed, not waited for
    assert no_sandbox_processes_left()


def test_sleeping_forever_times_out_on_wall_clock(task) -> None:
    reward, details = attack(task, "import time\ntime.sleep(3600)", timeout_s=1.0)
    assert (reward, details["reason"]) == (0.0, "timeout")


def test_memory_bomb_hits_the_memory_limit(task) -> None:
    body = "hoard = []\nwhile True:\n    hoard.append(bytearray(100 * 1024 * 1024))"
    reward, details = attack(task, body, memory_mb=256, timeout_s=20.0)
    assert (reward, details["reason"]) == (0.0, "memory")
    assert details["error_type"] == "MemoryError"


def test_fork_bomb_is_capped_and_cleaned_up(task) -> None:
    body = "import os\nwhile True:\n    os.fork()"
    reward, details = attack(task, body, max_processes=8, timeout_s=3.0)
    assert reward == 0.0
    assert details["reason"] in {"process_limit", "timeout"}, details
    assert no_sandbox_processes_left()


def test_write_outside_its_directory_leaves_host_files_untouched(task, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    body = f"open({str(victim)!r}, 'w').write('pwned')\nreturn False"
    reward, details = attack(task, body)
    assert reward == 0.0
    assert details["reason"] == "runtime_error"
    assert details["error_type"] == "FileNotFoundError"
    assert victim.read_text() == "original"

    # A directory the sandbox does see (the interpreter's) is mounted read-only.
    planted = Path(sys.base_prefix).resolve() / "gymflow-sandbox-escape.txt"
    body = f"open({str(planted)!r}, 'w').write('pwned')\nreturn False"
    reward, details = attack(task, body)
    assert (reward, details["reason"]) == (0.0, "read_only_filesystem")
    assert not planted.exists()


def test_opening_a_socket_fails(task) -> None:
    body = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\nreturn False"
    reward, details = attack(task, body)
    assert (reward, details["reason"]) == (0.0, "network")
    body = "import socket\nsocket.getaddrinfo('pypi.org', 443)\nreturn False"
    reward, details = attack(task, body)
    assert (reward, details["reason"]) == (0.0, "network")


def test_killing_its_parent_fails_and_parent_survives(task) -> None:
    me = os.getpid()
    for target in ("os.getppid()", str(me), "-1"):
        body = f"import os, signal\nos.kill({target}, signal.SIGKILL)\nreturn False"
        reward, details = attack(task, body)
        assert reward == 0.0
        assert details["reason"] in {"permission_denied", "runtime_error", "killed", "tests_failed"}
    assert os.getpid() == me  # this test process is still here to check
    assert no_sandbox_processes_left()


def test_huge_file_hits_the_file_size_limit(task) -> None:
    body = "with open('big', 'wb') as f:\n    f.write(b'x' * (64 << 20))\nreturn False"
    reward, details = attack(task, body, max_file_mb=4, memory_mb=1024)
    assert (reward, details["reason"]) == (0.0, "file_size")


def test_exiting_early_is_not_a_pass(task) -> None:
    # A clean exit mid-test is how a finished run looks: ending the tests that way is tampering.
    for body in ("import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit"):
        reward, details = attack(task, body)
        assert (reward, details["reason"], details["outcome"]) == (0.0, "tampering", "exited")
        assert details["tampering"][0].startswith("ended_early"), details
    for body in ("import os\nos._exit(3)", "import sys\nsys.exit(2)"):
        reward, details = attack(task, body)
        assert (reward, details["reason"]) == (0.0, "exited"), details


def test_missing_bwrap_is_a_verifier_error_not_a_failure(task, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(VerifierError) as caught:
        attack(task, "return False")
    assert caught.value.kind == "sandbox_error"
    server = load_environment("humaneval").resources_server()
    verification = server.verify_sync(VerifyInput(task, task.reference))
    assert (verification.status, verification.failure_kind) == (VERIFY_ERROR, "sandbox_error")
    assert verification.reward is None


def test_program_runs_without_network_as_an_unprivileged_user() -> None:
    probe = (
        "import os, socket\n"
        "def probe():\n"
        "    return (os.getuid(), os.getgid(), socket.gethostname(), os.getcwd(),\n"
        "            sorted(os.listdir('/')))\n"
    )
    with Sandbox(probe, SandboxLimits(timeout_s=5)) as box:
        box.load()
        uid, gid, host, cwd, root = box.call("probe")
    assert box.cpu_s is not None and 0 < box.cpu_s < 5
    assert box.evidence == []
    assert uid != 0 and gid != 0
    assert (host, cwd) == ("sandbox", "/tmp")
    assert "etc" not in root and "home" not in root


def test_verification_runs_in_a_bounded_pool(task, monkeypatch) -> None:
    """Many rollouts verify at once, off the event loop, at most one sandbox per core: each runs
    in a verifier worker process (gymflow.verifiers.pool), which judges one rollout at a time."""
    active, peak, lock = 0, 0, threading.Lock()
    real_run = pool._Worker.run

    def counting_run(self, ref, inputs, *rest):
        nonlocal active, peak
        assert len(inputs) == 1  # one rollout, so one sandbox, per worker at a time
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            return real_run(self, ref, inputs, *rest)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(pool._Worker, "run", counting_run)
    env = load_environment("humaneval")
    server = env.resources_server()
    assert server.verify_timeout is not None
    tasks = env.tasks("test")[:8]

    async def verify_all():
        sessions = [await server.seed_session(t) for t in tasks]
        return await asyncio.gather(
            *(
                server.verify(s, t, t.reference if i % 2 else t.distractor, [])
                for i, (s, t) in enumerate(zip(sessions, tasks, strict=True))
            )
        )

    results = asyncio.run(verify_all())
    assert [v.status for v in results] == [VERIFIED] * 8
    assert [v.passed for v in results] == [i % 2 == 1 for i in range(8)]
    assert 1 <= peak <= sandbox_host.pool_size()


# -- limits that hold against code trying to get around them (as root, too) ----------------------
PROBES = r"""
import os, resource, socket, subprocess

def raise_limits():
    refused = {}
    for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE"):
        try:
            unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
            resource.setrlimit(getattr(resource, name), unlimited)
            refused[name] = False
        except (ValueError, OSError):
            refused[name] = True
    return refused

def fill(folder, files, mb):
    written = 0
    try:
        os.makedirs(folder, exist_ok=True)
        for i in range(files):
            with open(f"{folder}/f{i}", "wb") as f:
                for _ in range(mb):
                    f.write(b"x" * (1 << 20))
                    written += 1
    except OSError as exc:
        return written, exc.errno
    return written, None

def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr

def connect_abstract(name):
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect("\0" + name)
            return "connected"
        except OSError as exc:
            return exc.errno

def raw_socket():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        return "opened"
    except OSError as exc:
        return exc.errno
"""


@pytest.fixture(scope="module")
def probes():
    with Sandbox(PROBES, SandboxLimits(timeout_s=20, tmp_mb=32, max_file_mb=16)) as box:
        box.load()
        yield box
    assert box.evidence == []


def test_rlimits_cannot_be_raised_from_inside(probes) -> None:
    assert probes.call("raise_limits") == dict.fromkeys(
        ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE"), True
    )


def test_tmp_size_holds_across_many_small_files(probes) -> None:
    # Six 10 MB files, each under the 16 MB file-size limit: /tmp fills at 32 MB.
    written, errno = probes.call("fill", "/tmp/spread", 6, 10)
    assert (written, errno) == (32, 28)  # ENOSPC
    # /dev is the other writable-looking tmpfs: not writable by the sandbox's user.
    assert probes.call("fill", "/dev/shm", 2, 1)[0] == 0
    assert probes.call("fill", "/dev/hoard", 1, 1)[0] == 0


def test_no_user_namespace_so_no_private_tmpfs(probes) -> None:
    """The issue's escape: become root in a new user namespace, mount a tmpfs, fill it."""
    code, output = probes.call(
        "run", "unshare", "-Urm", "sh", "-c", "mount -t tmpfs none /mnt && head -c 64M /dev/zero"
    )
    assert code != 0 and "unshare failed" in output, output
    code, output = probes.call("run", "unshare", "-n", "true")  # nor a network namespace
    assert code != 0, output


def test_network_holds_against_raw_and_host_abstract_sockets(probes) -> None:
    import socket

    name = f"gymflow-sandbox-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("\0" + name)  # the host's abstract namespace: not the sandbox's
        listener.listen()
        assert probes.call("connect_abstract", name) == 111  # ECONNREFUSED
    assert probes.call("raw_socket") == 1  # EPERM


def test_tmp_filling_fails_with_disk_full(task) -> None:
    body = (
        "for i in range(8):\n"
        "    with open(f'/tmp/f{i}', 'wb') as f:\n"
        "        f.write(b'x' * (8 << 20))\n"
        "return False"
    )
    reward, details = attack(task, body, memory_mb=1024)
    assert (reward, details["reason"]) == (0.0, "disk_full"), details


def test_mapping_past_the_memory_limit_fails(task) -> None:
    body = "import mmap\nhoard = mmap.mmap(-1, 2 << 30)\nreturn False"
    reward, details = attack(task, body, memory_mb=256)
    assert (reward, details["reason"]) == (0.0, "memory"), details


def test_a_code_exec_verifier_is_bounded_whatever_its_environment_declares(task) -> None:
    """A plain resources server with code_exec still verifies in a worker process under a time
    bound: the verifier declares it, not the environment."""
    from gymflow.environments.resources import ResourcesServer

    env = load_environment("humaneval")
    plain = ResourcesServer(env)
    assert (get_verifier("code_exec").runs, get_verifier("code_exec").timeout_s) == ("worker", 300)
    assert plain.verify_timeout == 300
    results = plain.verify_many(VerifyInput(task, text) for text in (task.reference, "x = ("))
    assert [v.passed for v in results] == [True, False]
    assert pool.worker_pool().pids(), "the verifications ran in verifier worker processes"


def test_a_worker_that_starts_sweeps_what_a_killed_one_left(tmp_path: Path) -> None:
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = tmp_path / f"{sandbox_host.SCRATCH_PREFIX}{dead.pid}-abc"
    orphan.mkdir()
    (orphan / "solution.py").write_text("secret = 1")
    alive = tmp_path / f"{sandbox_host.SCRATCH_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    assert sandbox_host.sweep_orphans(str(tmp_path)) == [orphan]
    assert not orphan.exists() and alive.exists()


def test_killed_worker_leaves_an_orphan_that_the_next_worker_removes(task) -> None:
    import signal

    env = load_environment("humaneval")
    workers = pool.VerifierPool(1)
    ref = VerifierRef.of(env, {"timeout_s": 60.0})
    sleeper = f"```python\n{task.data['prompt']}    import time\n    time.sleep(60)\n```"
    failed: list[BaseException] = []

    def verify_sleeper() -> None:
        try:
            workers.run(ref, [VerifyInput(task, sleeper)], timeout=120)
        except pool.WorkerFailed as exc:
            failed.append(exc)

    thread = threading.Thread(target=verify_sleeper)
    thread.start()
    try:
        deadline, folder = time.monotonic() + 60, None
        while folder is None and time.monotonic() < deadline:
            for candidate in Path("/tmp").glob(f"{sandbox_host.SCRATCH_PREFIX}*"):
                owner = int(candidate.name[len(sandbox_host.SCRATCH_PREFIX) :].split("-")[0])
                if _parent_of(owner) == os.getpid():
                    folder, worker = candidate, owner
            time.sleep(0.05)
        assert folder is not None, "the worker never started its sandbox"
        os.kill(worker, signal.SIGKILL)  # the worker alone: no cleanup runs
        thread.join(30)
        assert failed and folder.exists()  # the orphan, with the model's code in it
        assert no_sandbox_processes_left(worker)  # its sandbox died with it
        verdict = workers.run(ref, [VerifyInput(task, task.reference)], timeout=120)[0]
        assert verdict.passed
        assert not folder.exists()  # the new worker swept it as it started
    finally:
        thread.join(30)
        workers.shutdown()


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
