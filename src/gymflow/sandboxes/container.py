"""A workspace sandbox in a container (docker or podman), for tasks that bring
environment/Dockerfile or name an image.

The image is built from the task's environment/ folder (tagged by a hash of it, so an unchanged
task builds once), or pulled by name; a task with neither runs in `DEFAULT_IMAGE` (or
`GYMFLOW_CONTAINER_IMAGE`) with its environment/ files copied to /app. The container has no
network (`--network none`) and task.toml's CPU and memory limits (`--cpus`, `--memory`); the model
endpoint reaches it as in the bubblewrap sandbox, through a unix socket in a bound folder and
`model_bridge.py`, which needs a `python3` in the image. Each command is a `exec` into the
container, stopped after its time limit by restarting the container (its files stay)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import posixpath
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from gymflow.core.bounded_files import FileBoundError
from gymflow.core.processes import child_env
from gymflow.core.trees import remove_tree
from gymflow.sandboxes.base import (
    FOLDERS,
    WORKDIR,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxSpec,
    copy_folder,
)
from gymflow.sandboxes.model_socket import INSIDE_PORT, ModelSocket, inside_url
from gymflow.sandboxes.taken_out import copy_out
from gymflow.verifiers.sandbox_host import SCRATCH_PREFIX

DEFAULT_IMAGE = "python:3.12-slim"
IMAGE_VARIABLE = "GYMFLOW_CONTAINER_IMAGE"
_BRIDGE = Path(__file__).with_name("model_bridge.py")
OUTPUT_TAIL = 16_000


def engine_ready(engine: str) -> str | None:
    """Why `engine` cannot run containers here (None when it can): not installed, or its daemon
    does not answer."""
    path = shutil.which(engine)
    if path is None:
        return f"{engine} is not installed"
    import subprocess

    try:
        done = subprocess.run(
            [path, "info"], capture_output=True, timeout=20, check=False, env=_engine_env()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{engine} info` failed: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        return f"`{engine} info` failed: {reason[-1] if reason else done.returncode}"
    return None


def _engine_env() -> dict[str, str]:
    # The engine's CLI reads its own settings (the daemon's address, its config folder); a
    # container sees only what `-e` gives it.
    return child_env(prefixes=("DOCKER_", "CONTAINER_", "PODMAN_"))


async def _run(*argv: str, timeout_s: float = 600.0) -> tuple[int | None, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=_engine_env()
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, ""
    return proc.returncode, out.decode(errors="replace")[-OUTPUT_TAIL:]


class ContainerSandbox(Sandbox):
    engine = "docker"

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.container = f"gymflow-{os.getpid()}-{secrets.token_hex(4)}"
        self._scratch: Path | None = None
        self._socket: ModelSocket | None = None
        self._started = False

    @classmethod
    def refusal(cls, spec: SandboxSpec) -> str | None:
        problem = engine_ready(cls.engine)
        if problem:
            return problem
        if spec.allow_internet:
            return "it asks for the internet; this sandbox reaches the model endpoint only"
        if spec.gpus:
            return f"it asks for {spec.gpus} GPU(s); gymflow passes none to a container"
        return None

    async def _image(self) -> str:
        if self.spec.docker_image:
            return self.spec.docker_image
        if self.spec.dockerfile is None:
            return os.environ.get(IMAGE_VARIABLE, DEFAULT_IMAGE)
        digest = hashlib.sha256()
        for path in sorted(self.spec.dockerfile.rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(self.spec.dockerfile)).encode())
                digest.update(path.read_bytes())
        tag = f"gymflow-task:{digest.hexdigest()[:16]}"
        code, output = await _run(self.engine, "build", "-q", "-t", tag, str(self.spec.dockerfile))
        if code != 0:
            raise SandboxError(f"{self.engine} build of {self.spec.dockerfile} failed: {output}")
        return tag

    async def start(self) -> None:
        problem = self.refusal(self.spec)
        if problem:
            raise SandboxError(f"{self.engine} cannot run this task: {problem}")
        self._scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        shutil.copy(_BRIDGE, self._scratch / "bridge.py")
        image = await self._image()
        code, output = await _run(
            self.engine, "run", "-d", "--name", self.container, "--network", "none",
            "--cpus", str(self.spec.cpus), "--memory", f"{self.spec.memory_mb}m",
            "-v", f"{self._scratch}:/run/gymflow", "-w", WORKDIR, "--entrypoint", "sleep",
            image, "infinity",
        )  # fmt: skip
        if code != 0:
            await self.stop()
            raise SandboxError(f"{self.engine} run {image} failed: {output}")
        self._started = True
        await self._run_checked("mkdir -p " + " ".join(FOLDERS))
        if self.spec.dockerfile is None:
            await self.upload(self.spec.workspace, WORKDIR)

    async def _run_checked(self, command: str) -> None:
        result = await self.exec(command, timeout_s=120)
        if not result.ok:
            raise SandboxError(f"`{command}` failed in the container: {result.output}")

    async def expose_model(self, base_url: str) -> str:
        assert self._scratch is not None, "start the sandbox first"
        if self._socket is not None:
            await self._socket.close()
        self._socket = ModelSocket(self._scratch / "model.sock", base_url)
        await self._socket.open()
        (self._scratch / "model.sock").chmod(0o666)  # the image's user is not ours
        return inside_url(base_url)

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        argv = [self.engine, "exec", "-w", WORKDIR]
        if stdin is not None:
            argv.append("-i")
        for key, value in (env or {}).items():
            argv += ["-e", f"{key}={value}"]
        argv.append(self.container)
        if self._socket is not None:
            argv += ["python3", "/run/gymflow/bridge.py", "/run/gymflow/model.sock"]
            argv.append(str(INSIDE_PORT))
        argv += ["bash", "-c", command]
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=_engine_env(),
        )
        try:
            out, _ = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout_s
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            # what the command started lives on in the container: restart it (files stay)
            await _run(self.engine, "restart", "-t", "0", self.container)
            return ExecResult(None, "", round(time.monotonic() - started, 3), "timeout")
        code = proc.returncode
        limit = "memory" if code == 137 else None
        text = out.decode(errors="replace")[-OUTPUT_TAIL:]
        return ExecResult(
            None if limit else code, text, round(time.monotonic() - started, 3), limit
        )

    async def upload(self, source: Path, target: str) -> None:
        """A folder goes in as a copy made here (`copy_folder`): `cp` would take it whole."""
        await self._run_checked(f"mkdir -p {target}")
        with tempfile.TemporaryDirectory(prefix="gymflow-container-in-") as scratch:
            origin = str(source)
            if source.is_dir():
                await asyncio.to_thread(copy_folder, source, Path(scratch))
                origin = f"{scratch}/."
            code, output = await _run(self.engine, "cp", origin, f"{self.container}:{target}")
        if code != 0:
            raise SandboxError(f"cannot copy {source} into the container's {target}: {output}")

    async def download(self, source: str, target: Path) -> list[str]:
        """`docker cp` keeps links as links: it copies into a folder of its own, and only what
        `copy_out` takes from there reaches `target` (the link is removed with the folder)."""
        with tempfile.TemporaryDirectory(prefix="gymflow-container-out-") as scratch:
            copied = Path(scratch) / (posixpath.basename(source.rstrip("/")) or "root")
            code, output = await _run(self.engine, "cp", f"{self.container}:{source}", str(copied))
            if code != 0:
                raise SandboxError(f"cannot copy {source} out of the container: {output}")
            try:
                return await asyncio.to_thread(copy_out, copied, target)
            except (FileNotFoundError, FileBoundError):
                raise SandboxError(f"{source}: not a file or folder in the container") from None
            except OSError as exc:
                raise SandboxError(f"cannot copy {source} out of the container: {exc}") from None

    async def reset(self, inside: str) -> None:
        await self._run_checked(f"rm -rf {inside} && mkdir -p {inside}")

    async def stop(self) -> None:
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._started:
            await _run(self.engine, "rm", "-f", self.container)
            self._started = False
        if self._scratch is not None:
            with contextlib.suppress(OSError):
                remove_tree(self._scratch)
            self._scratch = None


class DockerSandbox(ContainerSandbox):
    name = engine = "docker"


class PodmanSandbox(ContainerSandbox):
    name = engine = "podman"
