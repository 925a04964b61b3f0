"""Files that come out of a sandbox are made by the code it ran (attack pass 7, s04): an agent's
`ln -sf /dev/zero /logs/agent/trajectory.json` was copied out as a link and read on the host
until the run passed 2 GB; a link to a host file put that file into the rollout's trajectory.
Now a download takes folders and regular files only, within their bounds; what stays behind is
named, and the rollout records it (`agent_logs_refused`, its error, health's
`agent_log_refused`), never a crash or a reward the tests did not give."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow.core.bounded_files import FileBoundError, read_bounded
from gymflow.environments.registry import Benchmark
from gymflow.environments.workspace.environment import WorkspaceEnvironment
from gymflow.sandboxes import SandboxSpec, taken_out
from gymflow.sandboxes.bubblewrap import BubblewrapSandbox
from tests.conftest import GYM, require_tool
from tests.faults.stores import query
from tests.workspace.test_agent_outcomes import _own, _rollout

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "gymflow" / "builtin" / "workspace"
SECRET = "host-secret-7f3a91"


def _links_under(folder: Path) -> list[Path]:
    return [Path(root, name) for root, dirs, files in os.walk(folder)
            for name in dirs + files if Path(root, name).is_symlink()]  # fmt: skip


def test_a_download_takes_no_link_device_or_long_file_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_tool("bwrap")
    monkeypatch.setattr(taken_out, "MAX_FILE_BYTES", 4096)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    host_file = tmp_path / "host.json"
    host_file.write_text(json.dumps({"secret": SECRET}))
    target = tmp_path / "out"
    made = " && ".join([
        "mkdir -p /logs/agent/sub",
        "ln -s /dev/zero /logs/agent/trajectory.json",
        f"ln -s {host_file} /logs/agent/mini.traj.json",
        "ln -s /etc /logs/agent/sub/etc",
        "mkfifo /logs/agent/pipe",
        "head -c 5000 /dev/zero > /logs/agent/long.log",
        "echo kept > /logs/agent/sub/kept.txt",
    ])  # fmt: skip

    async def scenario() -> list[str]:
        async with BubblewrapSandbox(SandboxSpec(workspace=workspace)) as box:
            result = await box.exec(made, timeout_s=30)
            assert result.exit_code == 0, result.output
            return await box.download("/logs/agent", target)

    left = asyncio.run(scenario())
    assert left == [
        "agent/long.log: 5,000 bytes, past the 4,096 read here",
        "agent/mini.traj.json: a link; left in the sandbox",
        "agent/pipe: not a regular file (a device, FIFO or socket); left in the sandbox",
        "agent/sub/etc: a link; left in the sandbox",
        "agent/trajectory.json: a link; left in the sandbox",
    ]
    assert _links_under(target) == []
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == [
        "sub",
        "sub/kept.txt",
    ]
    assert (target / "sub" / "kept.txt").read_text() == "kept\n"


def test_the_one_reader_refuses_a_link_a_device_and_a_long_file(tmp_path: Path) -> None:
    (tmp_path / "short").write_text("ok")
    (tmp_path / "long").write_bytes(b"x" * 11)
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert read_bounded(tmp_path / "short", 10) == b"ok"
    with pytest.raises(FileBoundError, match=r"long: 11 bytes, past the 10 read here"):
        read_bounded(tmp_path / "long", 10)
    with pytest.raises(FileBoundError, match=r"zero: a link; not followed"):
        read_bounded(tmp_path / "zero", 10)
    with pytest.raises(FileBoundError, match=r"zero: not a regular file"):
        read_bounded(tmp_path / "zero", 10, follow_links=True)


@pytest.fixture
def fix_median(tmp_path: Path) -> WorkspaceEnvironment:
    require_tool("bwrap")
    root = tmp_path / "tasks"
    shutil.copytree(SHIPPED / "fix-median", root / "fix-median")
    (tmp_path / "benchmarks").mkdir()
    benchmark = Benchmark(name="one", workspace="../tasks")
    return WorkspaceEnvironment.from_benchmark(benchmark, tmp_path / "benchmarks" / "one.yaml")


def test_an_agent_log_linked_out_of_the_sandbox_is_left_there_and_named(
    fix_median: WorkspaceEnvironment, tmp_path: Path
) -> None:
    """The agent fixes the task, then leaves its ATIF trajectory as a link to a host file of the
    right shape (another run's export) and a log as a link to /dev/zero. On main the host file
    became this rollout's trajectory."""
    host_atif = tmp_path / "other-run-trajectory.json"
    steps = [{"source": "user", "message": "hi"}, {"source": "agent", "message": SECRET}]
    host_atif.write_text(json.dumps({"steps": steps}))
    solve = (SHIPPED / "fix-median" / "solution" / "solve.sh").read_text()
    line = (
        f"bash -c {shlex.quote(solve)} && mkdir -p /logs/agent && "
        f"ln -sf {host_atif} /logs/agent/trajectory.json && "
        "ln -sf /dev/zero /logs/agent/codex.jsonl && echo done"
    )
    episode, verdict = _rollout(fix_median, _own(line))
    assert episode.failure_kind is None, episode.error
    assert SECRET not in json.dumps(episode.trajectory)
    assert episode.counters["agent_logs_refused"] == 2
    (said,) = episode.left_out
    assert "agent/trajectory.json: a link; left in the sandbox" in said
    assert "agent/codex.jsonl: a link; left in the sandbox" in said
    # the tests' own verdict of the agent's work, not a 0 for the refused log
    assert (verdict.status, verdict.reward, verdict.passed) == ("ok", 1.0, True)


def _address_space(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@pytest.mark.slow
def test_gym_eval_run_with_a_trajectory_linked_to_dev_zero(tmp_path: Path) -> None:
    """The attack as it was run: `gym eval run` of a workspace task whose agent command links
    its trajectory to /dev/zero. On main it passed 2 GB in 34 s; here its address space is held
    at 8 GiB (a MemoryError then, not the machine's memory), and the run finishes: the rollout
    completed, judged by the tests, its error naming the link, health's `agent_log_refused`."""
    require_tool("bwrap")
    data = tmp_path / "data"
    shutil.copytree(SHIPPED / "fix-median", data / "tasks" / "fix-median")
    (data / "benchmarks").mkdir()
    (data / "benchmarks" / "one.yaml").write_text("name: one\nworkspace: ../tasks\n")
    line = "ln -sf /dev/zero /logs/agent/trajectory.json; echo done"
    config = tmp_path / "eval.yaml"
    config.write_text(json.dumps({"benchmark": "one", "repeats": 1,
                                  "harness": {"name": "command", "command": line}}))  # fmt: skip
    out = tmp_path / "run"
    result = subprocess.run(
        [GYM, "eval", "run", str(config), "--out", str(out)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200", "GYMFLOW_BENCHMARKS_PATH": str(data)},
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_address_space(8 << 30),
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stdout + result.stderr  # the health gate
    assert "agent_log_refused" in result.stdout
    store = out / "gymflow.duckdb"
    ((status, failure, error),) = query(store, "SELECT status, failure_kind, error FROM rollouts")
    assert (status, failure) == ("completed", None)
    assert "agent/trajectory.json: a link; left in the sandbox" in error
    assert query(store, "SELECT status FROM verifications") == [("ok",)]


def test_a_reward_file_past_its_bound_is_no_reward(fix_median: WorkspaceEnvironment) -> None:
    """reward.txt of "1" and 70,000 spaces: main read its first 64 KiB and judged it 1.0."""
    test_sh = fix_median.root / "fix-median" / "tests" / "test.sh"
    test_sh.write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "{ echo 1; head -c 70000 /dev/zero | tr '\\0' ' '; } > /logs/verifier/reward.txt\n"
    )
    episode, verdict = _rollout(fix_median, _own("echo done"))
    assert episode.failure_kind is None, episode.error
    assert (verdict.reward, verdict.failure_kind) == (None, "reward_missing")
    assert "/logs/verifier/reward.txt is longer than a reward" in verdict.details["error"]


def test_the_container_download_keeps_no_link_docker_cp_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`docker cp` copies links as links: what it copies out lands in a folder of gymflow's
    own, and only what the one rule takes reaches the caller (no engine runs on this machine's
    CI, so `docker cp` is a stand-in that leaves what the real one would)."""
    from gymflow.sandboxes import container

    async def docker_cp(*argv: str, timeout_s: float = 600.0) -> tuple[int | None, str]:
        assert argv[:2] == ("docker", "cp") and argv[2].endswith(":/logs/agent"), argv
        copied = Path(argv[3])
        copied.mkdir()
        (copied / "trajectory.json").symlink_to("/dev/zero")
        (copied / "codex.jsonl").symlink_to(tmp_path / "host-file")
        (copied / "kept.log").write_text("kept\n")
        return 0, ""

    monkeypatch.setattr(container, "_run", docker_cp)
    box = container.DockerSandbox(SandboxSpec(workspace=tmp_path))
    target = tmp_path / "out"
    left = asyncio.run(box.download("/logs/agent", target))
    assert left == [
        "agent/codex.jsonl: a link; left in the sandbox",
        "agent/trajectory.json: a link; left in the sandbox",
    ]
    assert _links_under(target) == [] and (target / "kept.log").read_text() == "kept\n"
