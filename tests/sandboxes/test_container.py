"""The container sandbox (docker or podman) where an engine answers: it builds the task's
environment/Dockerfile, runs with no network, and keeps files across commands. Skipped where no
engine runs (this machine's CI has none): `gym env validate` then refuses such tasks by name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gymflow.sandboxes import SandboxSpec
from gymflow.sandboxes.container import DockerSandbox, PodmanSandbox, engine_ready

ENGINES = [DockerSandbox, PodmanSandbox]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ENGINES, ids=lambda kind: kind.name)
def test_a_dockerfile_task_runs_in_a_container(kind, tmp_path: Path) -> None:
    problem = engine_ready(kind.engine)
    if problem:
        pytest.skip(problem)
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "FROM python:3.12-slim\nWORKDIR /app\nRUN echo built > /app/built.txt\n"
    )

    async def scenario():
        spec = SandboxSpec(workspace=env, dockerfile=env, memory_mb=256)
        async with kind(spec) as box:
            first = await box.exec("cat built.txt && echo kept > kept.txt", timeout_s=60)
            second = await box.exec("cat kept.txt", timeout_s=60)
            offline = await box.exec(
                "python3 -c \"import urllib.request; urllib.request.urlopen('http://1.1.1.1', "
                'timeout=3)"',
                timeout_s=60,
            )
            late = await box.exec("sleep 30", timeout_s=1)
            return first, second, offline, late

    first, second, offline, late = asyncio.run(scenario())
    assert first.output.strip() == "built"
    assert second.output.strip() == "kept"
    assert offline.exit_code != 0
    assert late.limit == "timeout"


@pytest.mark.parametrize("kind", ENGINES, ids=lambda kind: kind.name)
def test_without_an_engine_the_refusal_names_it(kind, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no engine on this PATH
    refusal = kind.refusal(SandboxSpec(workspace=tmp_path))
    assert refusal == f"{kind.engine} is not installed"


@pytest.mark.parametrize("kind", ENGINES, ids=lambda kind: kind.name)
def test_a_folder_goes_in_without_its_bytecode_caches(kind, tmp_path: Path, monkeypatch) -> None:
    """What `cp` is given, by an engine that records it: the workspace's files, never a
    `__pycache__` (pip writes one beside every .py file of a task it installs)."""
    received = tmp_path / "received"
    engine = tmp_path / "bin" / kind.engine
    engine.parent.mkdir()
    engine.write_text(
        '#!/bin/sh\nif [ "$1" = cp ]; then mkdir -p "$DOCKER_RECEIVED" && '
        'cp -R "$2" "$DOCKER_RECEIVED/"; fi\n'
    )
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{engine.parent}:/usr/bin:/bin")
    monkeypatch.setenv("DOCKER_RECEIVED", str(received))
    workspace = tmp_path / "workspace"
    (workspace / "pkg" / "__pycache__").mkdir(parents=True)
    (workspace / "pkg" / "mod.py").write_text("X = 1\n")
    (workspace / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    box = kind(SandboxSpec(workspace=workspace))
    box.container = "fake"
    asyncio.run(box.upload(workspace, "/app"))
    assert sorted(p.relative_to(received).as_posix() for p in received.rglob("*")) == [
        "pkg",
        "pkg/mod.py",
    ]
