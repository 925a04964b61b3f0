"""A workspace sandbox made with bubblewrap: the system's programs, read-only, around the task's
own writable folders, with no network but the model endpoint.

Design. Every command runs in a fresh bubblewrap (new network, PID, IPC and UTS namespaces) over a
root built from an allow-list, the code sandbox's (`gymflow.verifiers.sandbox.system_root`): /usr
with /bin, /sbin and /lib*, /etc (its files that not every user may read left out: shadow,
private keys; /etc/passwd and /etc/group listing the sandbox's own user, not the host's accounts;
the host's name, machine id and subordinate-id lists empty), and the install prefixes the agent
runs from (`SandboxSpec.installs`; a venv brings its interpreter's prefix, bound alone even where
it lies in a folder that stays hidden, pyenv under a home folder). Nothing else of the host is
there: not read-only but absent, so the home folder, the seal key's folder, the runs, other
copies of the task and the host's /tmp cannot be read by the agent or the task's tests, whoever
the command runs as. /etc is shown whole rather than from a list: Debian's programs reach into it
from /usr (424 links here: awk and the editor through /etc/alternatives, a JDK's conf, Python's
sitecustomize), so a list would break what a task's tests run, for files every user of the host
may read anyway. The sandbox's folders (/app, /logs, /tests, /solution, /tmp) are folders in a
scratch directory bound writable, so files live from command to command while processes do not.
The paths the task names as `hidden` (its tests and its solution: the answer key) are hidden
too where they lie under a shown folder. The network namespace is empty; the model server is
reached through a unix socket bound in (gymflow.sandboxes.model_socket and model_bridge), so the
agent's only way out is the endpoint gymflow records.

Limits, from task.toml: memory through a memory cgroup per command where the host lets us make one
(the code sandbox's, gymflow.verifiers.sandbox_host), else an address-space rlimit; CPUs by pinning
the command to `cpus` cores; storage as the largest file it may write; time by the caller's
`timeout_s`, after which the whole process tree is killed. Commands run as a user id of their own
(as the code sandbox's do: `sandbox_host.sandbox_user`, then `as_user`): as root, an id of the
sandbox's slot, and without root a subordinate id in a user namespace of the owner's, so what the
owner owns among the shown folders stays unreadable and its processes cannot be signalled. Between
commands the sandbox's folders are the owner's; each command is lent them (and the model socket)
and gives them back when it ends, so the owner copies files in and out and removes them whatever
modes the command left. Scratch folders and cgroups are named after the owner's pid, so
`sandbox_host.sweep_orphans` removes what a killed owner left."""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import resource
import shutil
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

from gymflow.core.bounded_files import FileBoundError
from gymflow.core.processes import child_env
from gymflow.core.trees import remove_tree, walk
from gymflow.core.user_folders import user_config
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
from gymflow.verifiers.sandbox import as_user, bwrap_path, system_root, user_process_count
from gymflow.verifiers.sandbox_host import (
    SCRATCH_PREFIX,
    SLOT_SPAN,
    UID_BASE,
    SandboxUser,
    memory_cgroups,
    sandbox_user,
)

_BRIDGE = Path(__file__).with_name("model_bridge.py")
#: What runs the bridge inside: the system's interpreter, readable by any user (a pyenv or venv
#: interpreter may live under root's 0700 home).
BRIDGE_PYTHON = "/usr/bin/python3"
#: Processes one sandbox may run at once (a fork bomb stops here).
MAX_PROCESSES = 512
OUTPUT_TAIL = 16_000
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Workspace sandboxes take user ids from the top of this process's span (the code sandbox's
# slots take them from the bottom), one per live sandbox.
_free_uids: list[int] | None = None
_uids_lock = threading.Lock()  # local shards collect on threads of their own


#: How often a sandbox waiting for a user id looks again.
UID_POLL_S = 0.05


def _try_uid() -> int | None:
    global _free_uids
    with _uids_lock:
        if _free_uids is None:
            base = UID_BASE + (os.getpid() % 4096) * SLOT_SPAN
            _free_uids = [base + SLOT_SPAN - 1 - index for index in range(SLOT_SPAN // 2)]
        return _free_uids.pop() if _free_uids else None


async def _take_uid() -> int:
    """A user id of this process's workspace span; past SLOT_SPAN // 2 sandboxes at once (a run's
    concurrency above it) a sandbox waits for one to stop. Polled: collectors of local shards run
    on loops of their own, which no one asyncio primitive serves."""
    while (uid := _try_uid()) is None:
        await asyncio.sleep(UID_POLL_S)
    return uid


def _give_uid(uid: int) -> None:
    with _uids_lock:
        assert _free_uids is not None
        _free_uids.append(uid)


class BubblewrapSandbox(Sandbox):
    name = "bubblewrap"

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._scratch: Path | None = None
        self._uid: int | None = None  # the slot's, taken from this process's span
        self._user = SandboxUser(None)
        self._lent = False  # whether the folders are the sandbox user's (a command runs)
        self._socket: ModelSocket | None = None
        self._root: list[str] = []
        self._execs = 0

    @classmethod
    def refusal(cls, spec: SandboxSpec) -> str | None:
        if shutil.which("bwrap") is None:
            return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
        if spec.dockerfile is not None or spec.docker_image:
            what = "environment/Dockerfile" if spec.dockerfile else f"image {spec.docker_image}"
            return f"its {what} needs a container sandbox (harness.sandbox: docker or podman)"
        if spec.allow_internet:
            return (
                "it asks for the internet ([environment] allow_internet = true); this sandbox "
                "reaches the model endpoint only"
            )
        if spec.gpus:
            return f"it asks for {spec.gpus} GPU(s); this sandbox has none"
        for folder in _install_folders(spec.installs):
            private = _private_inside(folder)
            if private is not None:
                return (
                    f"the agent's install needs {folder} shown, which holds {private}: a "
                    "sandbox never shows that; install the agent in a folder of its own"
                )
        cores = len(os.sched_getaffinity(0))
        if spec.cpus > cores:
            return f"it asks for {spec.cpus} CPUs; this host has {cores}"
        return None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        problem = self.refusal(self.spec)
        if problem:
            raise SandboxError(f"bubblewrap cannot run this task: {problem}")
        self._root = await asyncio.to_thread(_root, self.spec)  # reads /etc's modes
        self._uid = await _take_uid()
        self._user = await asyncio.to_thread(sandbox_user, self._uid)  # tried once per process
        self._scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        self._scratch.chmod(0o755)
        try:
            for folder in FOLDERS:
                self._host_path(folder).mkdir()
            (self._scratch / "run").mkdir(mode=0o700)  # the model socket: no other user's way in
            uid = self._user.uid if self._user.uid is not None else os.geteuid()
            self._root += _accounts(self._scratch / "etc", uid)
            await self.upload(self.spec.workspace, WORKDIR)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._scratch is not None:
            with contextlib.suppress(SandboxError):  # removed as far as it can be
                await self._give_back()
            with contextlib.suppress(OSError):  # sweep_orphans takes what stays
                await asyncio.to_thread(remove_tree, self._scratch)
            self._scratch = None
        if self._uid is not None:
            _give_uid(self._uid)
            self._uid = None

    async def expose_model(self, base_url: str) -> str:
        assert self._scratch is not None, "start the sandbox first"
        if self._socket is not None:
            await self._socket.close()
        self._socket = ModelSocket(self._scratch / "run" / "model.sock", base_url)
        await self._socket.open()
        return inside_url(base_url)

    # -- files -----------------------------------------------------------------------------------
    def _host_path(self, inside: str) -> Path:
        """Where a path inside the sandbox lives on the host; only the sandbox's own folders."""
        assert self._scratch is not None, "start the sandbox first"
        path = posixpath.normpath(inside)
        for folder in FOLDERS:
            if path == folder or path.startswith(folder + "/"):
                return self._scratch / folder.strip("/") / path[len(folder) :].lstrip("/")
        raise SandboxError(f"{inside}: not in the sandbox's folders ({', '.join(FOLDERS)})")

    async def upload(self, source: Path, target: str) -> None:
        destination = self._host_path(target)
        try:
            if source.is_dir():
                await asyncio.to_thread(copy_folder, source, destination)
            else:
                destination.mkdir(parents=True, exist_ok=True)
                await asyncio.to_thread(shutil.copy2, source, destination / source.name)
        except OSError as exc:
            raise SandboxError(f"cannot copy {source} into the sandbox's {target}: {exc}") from None

    async def download(self, source: str, target: Path) -> list[str]:
        origin = self._host_path(source)
        try:
            return await asyncio.to_thread(copy_out, origin, target)
        except (FileNotFoundError, FileBoundError):
            raise SandboxError(f"{source}: not a file or folder in the sandbox") from None
        except OSError as exc:
            raise SandboxError(f"cannot copy {source} out of the sandbox: {exc}") from None

    async def reset(self, inside: str) -> None:
        """Empty a folder inside (what a command left there is gone, links included)."""
        path = self._host_path(inside)
        try:
            await asyncio.to_thread(remove_tree, path)
            path.mkdir(parents=True)
        except OSError as exc:
            raise SandboxError(f"cannot empty the sandbox's {inside}: {exc}") from None

    async def _lend(self) -> None:
        """Give the sandbox's folders and the model socket to the user its command runs as (ours
        already where it keeps our id)."""
        assert self._scratch is not None
        self._lent = True
        paths = [self._host_path(folder) for folder in FOLDERS]
        if self._socket is not None:
            paths.append(self._socket.path)
        if self._user.uid is not None:
            await self._chown(paths, self._user.uid)

    async def _give_back(self) -> None:
        """Take the folders back once the command has ended (root of the user namespace, where
        there is one, is us): what it left is ours to copy out and remove, and without root
        (which reads and removes whatever the modes) made readable and writable to us too."""
        if not self._lent:
            return
        folders = [self._host_path(folder) for folder in FOLDERS]
        if self._user.uid is not None:
            await self._chown(folders, 0)
        else:  # our own files: a folder the command left at mode 000 is still ours to open
            await asyncio.to_thread(_open_to_owner, folders)
        self._lent = False

    async def _chown(self, paths: list[Path], uid: int) -> None:
        """`paths` and everything under them to `uid` (of the sandbox user's namespace), links
        themselves and never what they point to; given back to us (0) in a user namespace, each
        also readable and writable (folders searchable) to us, as a folder of mode 000 was not."""
        if not self._user.namespace:

            def chown_tree() -> None:
                for root in paths:
                    os.lchown(root, uid, uid)
                    for folder, dirs, files in walk(root):
                        for name in dirs + files:
                            os.lchown(os.path.join(folder, name), uid, uid)

            await asyncio.to_thread(chown_tree)
            return
        script = 'chown -R -P -h "$0" -- "$@"' + (' && chmod -R u+rwX -- "$@"' if uid == 0 else "")
        proc = await asyncio.create_subprocess_exec(
            *self._user.namespace,
            "/bin/sh",
            "-c",
            script,
            f"{uid}:{uid}",
            *map(str, paths),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=child_env(),
        )
        _, error = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(f"cannot hand the sandbox's folders over: {error.decode()[-300:]}")

    # -- commands --------------------------------------------------------------------------------
    def _command(self, command: str, env: dict[str, str]) -> list[str]:
        assert self._scratch is not None
        bwrap = bwrap_path()
        argv = [
            *self._user.namespace,
            bwrap,
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
        ]
        argv += ["--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent"]
        argv += ["--new-session", *self._root, "--dev", "/dev", "--proc", "/proc"]
        argv += ["--tmpfs", "/run"]
        for folder in FOLDERS:
            argv += ["--bind", str(self._host_path(folder)), folder]
        argv += ["--perms", "0755", "--dir", "/run/gymflow"]
        argv += ["--ro-bind", str(_BRIDGE), "/run/gymflow/bridge.py"]
        if self._socket is not None:
            argv += ["--bind", str(self._socket.path), "/run/gymflow/model.sock"]
        argv += ["--remount-ro", "/", "--chdir", WORKDIR, "--clearenv"]
        base = {"PATH": _PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb"}
        for key, value in (base | env).items():
            argv += ["--setenv", key, value]
        argv += as_user(bwrap, self._user.uid, WORKDIR)
        if self._socket is not None:
            argv += [BRIDGE_PYTHON, "-I", "/run/gymflow/bridge.py", "/run/gymflow/model.sock"]
            argv += [str(INSIDE_PORT)]
        return [*argv, "/bin/bash", "-c", command]

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        if self._scratch is None:
            raise SandboxError("the sandbox is not started")
        self._execs += 1
        argv = self._command(command, env or {})
        cgroups = memory_cgroups()
        group = None
        if cgroups is not None:
            group = cgroups.make(f"{self._scratch.name}-e{self._execs}", self.spec.memory_mb << 20)
        log = self._scratch / f"exec-{self._execs}.log"
        limits = _Limits(self.spec, group)
        started = time.monotonic()
        limit = None
        try:
            await self._lend()
            with open(log, "wb") as output:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *argv,
                        stdin=asyncio.subprocess.PIPE
                        if stdin is not None
                        else asyncio.subprocess.DEVNULL,
                        stdout=output,
                        stderr=output,
                        start_new_session=True,
                        preexec_fn=limits.apply,
                        env=child_env(),  # what runs inside is given its own (--clearenv)
                    )
                except OSError as exc:
                    raise SandboxError(f"cannot start bubblewrap: {exc}") from None
            try:
                if stdin is not None:
                    await asyncio.wait_for(proc.communicate(stdin.encode()), timeout_s)
                else:
                    await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                limit = "timeout"
            finally:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
            if limit is None and group is not None and cgroups.oom_killed(group):
                limit = "memory"
        finally:
            if group is not None:
                cgroups.remove(group)
            await self._give_back()
        seconds = time.monotonic() - started
        output_text = _tail(log)
        log.unlink(missing_ok=True)
        code = None if limit else proc.returncode
        if code is not None and code < 0:
            code = 128 - code
        return ExecResult(code, output_text, round(seconds, 3), limit)


def _root(spec: SandboxSpec) -> list[str]:
    """The sandbox's root, on an empty tmpfs (the sandbox's own folders are made beside what it
    shows; `--remount-ro /` then closes the root itself): the system's programs, /etc without
    its secrets, and the spec's install prefixes, read-only; then the spec's hidden paths and
    gymflow's own package where they lie among them."""
    shown = [Path("/etc"), *_install_folders(spec.installs)]
    argv = ["--tmpfs", "/", *system_root(shown), *_etc_secrets_hidden()]
    visible = [Path("/usr"), *shown]
    for path in (*spec.hidden, _GYMFLOW):
        if path.exists() and any(path.resolve().is_relative_to(v) for v in visible):
            argv += ["--tmpfs", str(path.resolve()), "--remount-ro", str(path.resolve())]
    return argv


#: gymflow's own package, hidden wherever it is installed: its built-in tasks hold solutions.
_GYMFLOW = Path(__file__).resolve().parents[1]


def _private_inside(folder: Path) -> Path | None:
    """A folder of the user's own (home, the XDG folders, gymflow's key folder) that showing
    `folder` would show, if any."""
    private = [Path(os.environ[v]) for v in _XDG if os.environ.get(v)]
    for folder_of in (lambda: user_config("seal.key").parent, Path.home):
        with contextlib.suppress(RuntimeError):  # no home folder
            private.append(folder_of())
    return next((p for p in private if p.resolve().is_relative_to(folder)), None)


#: The XDG variables naming folders of the user's own.
_XDG = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")


def _install_folders(installs: tuple[Path, ...]) -> list[Path]:
    """Each install prefix (resolved), and for a venv its interpreter's own prefix (pyvenv.cfg's
    `home` is the interpreter's bin folder; a venv's python links to the interpreter)."""
    folders: set[Path] = set()
    for install in installs:
        prefix = install.resolve()
        folders.add(prefix)
        try:
            config = (prefix / "pyvenv.cfg").read_text(errors="replace")
        except OSError:
            continue  # not a venv
        for line in config.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                folders.add(Path(value.strip()).resolve().parent)
        python = prefix / "bin" / "python"
        if python.exists():
            folders.add(python.resolve().parent.parent)
    return sorted(f for f in folders if f != Path("/"))


#: Files of /etc that name the host's accounts or the host itself, hidden (shown empty) though
#: every user may read them: the account lists are replaced by `_accounts`.
_HOST_FACTS = (
    "passwd-",
    "group-",
    "subuid",
    "subuid-",
    "subgid",
    "subgid-",
    "machine-id",
    "hostname",
)


def _accounts(folder: Path, uid: int) -> list[str]:
    """Arguments that show /etc/passwd and /etc/group naming root, nobody and the sandbox's own
    user (`uid`, home /tmp) only, written in `folder`: the host's accounts and their home folders
    are not listed, and the command's id has a name (git and ssh refuse an id without one)."""
    folder.mkdir(mode=0o755)
    # by id, the sandbox's last: a test run as root that keeps our id names it sandbox too
    users = {0: "root:x:0:0:root:/root:/usr/sbin/nologin"}
    users[65534] = "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"
    users[uid] = f"sandbox:x:{uid}:{uid}:gymflow sandbox:/tmp:/bin/bash"
    groups = {0: "root:x:0:", 65534: "nogroup:x:65534:", uid: f"sandbox:x:{uid}:"}
    files = {"passwd": users, "group": groups}
    argv: list[str] = []
    for name, lines in files.items():
        (folder / name).write_text("".join(f"{line}\n" for line in lines.values()))
        (folder / name).chmod(0o644)
        argv += ["--ro-bind", str(folder / name), f"/etc/{name}"]
    for name in _HOST_FACTS:
        if os.path.lexists(f"/etc/{name}"):
            argv += ["--ro-bind", "/dev/null", f"/etc/{name}"]
    return argv


def _etc_secrets_hidden() -> list[str]:
    """Arguments that hide what in /etc not every user of the host may read (shadow, private
    keys, a database's access rules): a file is shown as empty, a folder as an empty one."""
    argv: list[str] = []
    for folder, dirs, files in os.walk("/etc"):
        for name in list(dirs):
            path = os.path.join(folder, name)
            if not _readable_by_all(path, 0o005):
                argv += ["--tmpfs", path, "--remount-ro", path]
                dirs.remove(name)
        for name in files:
            path = os.path.join(folder, name)
            if not _readable_by_all(path, 0o004):
                argv += ["--ro-bind", "/dev/null", path]
    return argv


def _readable_by_all(path: str, bits: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return True  # gone: nothing to hide
    return stat.S_ISLNK(info.st_mode) or info.st_mode & bits == bits


class _Limits:
    """The rlimits, cgroup and CPU pinning applied in the child between fork and exec; what the
    command starts inherits them."""

    def __init__(self, spec: SandboxSpec, group: Path | None) -> None:
        self.spec, self.group = spec, group
        # as root, the sandbox's user id is its own; otherwise our other processes count too (a
        # user namespace of ours charges its processes to us)
        self.budget = MAX_PROCESSES
        if os.geteuid() != 0:
            self.budget += user_process_count(os.geteuid())
        self.cores = sorted(os.sched_getaffinity(0))[: spec.cpus]

    def apply(self) -> None:
        if self.group is not None:
            (self.group / "cgroup.procs").write_text(str(os.getpid()))
        else:
            memory = self.spec.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        files = self.spec.storage_mb << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (files, files))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.budget, self.budget))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.sched_setaffinity(0, self.cores)


def _open_to_owner(roots: list[Path]) -> None:
    """What chmod -R u+rwX does, in this process: every folder under `roots` readable, writable
    and searchable to its owner, every file readable and writable; links are left as they are
    (the command's processes have ended: nothing swaps a folder for a link meanwhile)."""
    for root in roots:
        _add_mode(str(root), 0o700)
        for folder, dirs, files in walk(root):
            for name in dirs:
                _add_mode(os.path.join(folder, name), 0o700)  # before walk lists it
            for name in files:
                _add_mode(os.path.join(folder, name), 0o600)


def _add_mode(path: str, bits: int) -> None:
    with contextlib.suppress(OSError):
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode) and mode & bits != bits:
            os.chmod(path, stat.S_IMODE(mode) | bits)


def _tail(log: Path) -> str:
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, log.stat().st_size - OUTPUT_TAIL * 4))
            return handle.read().decode(errors="replace")[-OUTPUT_TAIL:]
    except OSError:
        return ""
