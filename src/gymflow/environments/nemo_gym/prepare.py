"""A NeMo Gym server's own requirements, installed as NeMo Gym installs them: into a venv of the
server's own, from the package registries, built once and cached.

NeMo Gym gives each server a venv with `nemo-gym` and the server's `requirements.txt` (or its
`pyproject.toml`'s dependencies). Here the
server's venv reads NeMo Gym's venv (`GYMFLOW_NEMO_GYM_VENV`) through a `.pth` file, so only what
the server adds beyond it is installed; a server whose requirements name nothing beyond
`nemo-gym` runs with NeMo Gym's interpreter itself. The venvs live under
`$XDG_CACHE_HOME/gymflow/nemo-gym-venvs/<server>-<hash>` (the hash covers the requirements and
NeMo Gym's venv), with a `prepared.json` holding what was installed and how long it took; a venv
without it is unfinished and built again. A requirement not on the registries (a git URL, a
path) is refused, naming it; so is one pip finds on none of them."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gymflow.core.config import ConfigError
from gymflow.core.processes import child_env
from gymflow.environments.nemo_gym.folder import NemoServer
from gymflow.environments.nemo_gym.launch import nemo_python

MARKER = "prepared.json"
#: The pip a server's venv is built with, installed into it first: pip normalises the names of
#: extras (PEP 685) from 23.3, as NeMo Gym's `uv pip` does; an older one drops
#: `lxml[html_clean]` (lxml calls it `html-clean`), and google_search's trafilatura then fails
#: to import `lxml.html.clean`. Part of the venv's cache key.
PIP = "pip>=23.3"
#: pip's words for a requirement none of the registries has.
_NOT_FOUND = re.compile(
    r"(?:No matching distribution found for|Could not find a version that satisfies the "
    r"requirement) (\S+)"
)
#: NeMo Gym's own requirement line (`-e nemo-gym[dev] @ ../../`, `-e ../../`, the repository
#: root, or `nemo-gym[dev]` in a pyproject.toml): the base, which NeMo Gym's venv already is.
_NEMO_GYM = re.compile(r"^(-e\s+)?(nemo-gym\b|\.\./\.\./?$)", re.IGNORECASE)


class PrepareError(ConfigError):
    """A server's requirements cannot be installed here; says which and why."""


@dataclass(frozen=True)
class Prepared:
    server: str
    python: Path
    installed: tuple[str, ...]  # the requirements installed into its venv ((): none needed)
    seconds: float
    cached: bool


def requirements(server: NemoServer) -> tuple[str, ...]:
    """The server's requirements beyond `nemo-gym` itself, as its requirements.txt lists them,
    or else its pyproject.toml's `[project].dependencies` (NeMo Gym installs a server from
    either; from the package, with `uv pip install --no-sources`, so the `[tool.uv.sources]`
    that point a dependency at a git repository are not used and the registries serve it:
    code_fim's `human-eval-infilling`). Raises PrepareError naming a requirement that is no
    registry package."""
    path = server.folder / "requirements.txt"
    if path.is_file():
        lines = enumerate(path.read_text(errors="replace").splitlines(), 1)
    elif (server.folder / "pyproject.toml").is_file():
        path = server.folder / "pyproject.toml"
        lines = _project_dependencies(path, server)
    else:
        return ()
    wanted = []
    for number, raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or _NEMO_GYM.match(line):
            continue
        if line.startswith("-") or "://" in line or line.startswith((".", "/")) or " @ " in line:
            raise PrepareError(
                f"{path}:{number}: {line!r} is not a package on the registries (PyPI): "
                f"NeMo Gym server {server.name} needs it, so it does not run here"
            )
        wanted.append(line)
    return tuple(wanted)


def _project_dependencies(path: Path, server: NemoServer) -> list[tuple[str, str]]:
    """`[project].dependencies` of a pyproject.toml, each with its place (`dependencies[i]`).
    One that `[tool.uv.sources]` takes from a git repository, a URL or a path is refused,
    named: what the registries hold under its name is not what the server was written against
    (code_fim's `human-eval-infilling` is on GitHub; PyPI's 2.15.0 holds no module)."""
    try:
        data = tomllib.loads(path.read_text(errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        raise PrepareError(
            f"{path}: not TOML ({exc}): NeMo Gym server {server.name}'s dependencies are unread"
        ) from None
    listed = (data.get("project") or {}).get("dependencies") or []
    if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
        raise PrepareError(f"{path}: [project].dependencies is no list of requirements")
    sources = ((data.get("tool") or {}).get("uv") or {}).get("sources") or {}
    elsewhere = {_name(n): source for n, source in sources.items() if isinstance(source, dict)}
    found = []
    for index, dependency in enumerate(listed):
        source = elsewhere.get(_name(dependency))
        if source is not None and not _NEMO_GYM.match(dependency):
            where = source.get("git") or source.get("url") or source.get("path") or source
            raise PrepareError(
                f"{path}:dependencies[{index}]: {dependency!r} comes from {where} "
                f"([tool.uv.sources]), which is not a package on the registries (PyPI): "
                f"NeMo Gym server {server.name} needs it, so it does not run here"
            )
        found.append((f"dependencies[{index}]", dependency))
    return found


def _name(requirement: str) -> str:
    """A requirement's project name, normalised (PEP 503): `Human_Eval.Infilling>=1` ->
    `human-eval-infilling`."""
    head = re.split(r"[\s\[<>=!~;@(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", head).lower()


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gymflow" / "nemo-gym-venvs"


def venv_dir(server: NemoServer, wanted: tuple[str, ...]) -> Path:
    digest = hashlib.sha256(
        json.dumps([list(wanted), str(nemo_python().parent.parent.resolve()), PIP]).encode()
    ).hexdigest()[:12]
    return cache_root() / f"{server.name}-{digest}"


def prepare(server: NemoServer, *, say=print) -> Prepared:
    """Build the server's venv unless it is cached; `say` hears what is installed and how long
    it took. Raises PrepareError naming the requirement pip found on no registry."""
    wanted = requirements(server)
    if not wanted:
        return Prepared(server.name, nemo_python(), (), 0.0, True)
    venv = venv_dir(server, wanted)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # one build at a time per venv: two runs of one server wait for each other's build
    with open(venv.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / MARKER).is_file():
            done = json.loads((venv / MARKER).read_text())
            return Prepared(server.name, venv / "bin" / "python", wanted, done["seconds"], True)
        return _build(server, wanted, venv, say)


def _build(server: NemoServer, wanted: tuple[str, ...], venv: Path, say) -> Prepared:
    say(f"{server.env_name}: installing {' '.join(wanted)} into {venv}")
    started = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)  # an unfinished build
    base = nemo_python()
    _run([str(base), "-m", "venv", "--without-pip", str(venv)], server)
    site = _site_packages(venv / "bin" / "python", server)
    (site / "_gymflow_nemo_gym.pth").write_text(f"{_site_packages(base, server)}\n")
    python = str(venv / "bin" / "python")
    _run([str(base), "-m", "pip", "--python", python, "install", "-q", PIP], server)
    _run([python, "-m", "pip", "install", "-q", *wanted], server)
    seconds = round(time.monotonic() - started, 1)
    (venv / MARKER).write_text(json.dumps({"installed": list(wanted), "seconds": seconds}))
    say(f"{server.env_name}: installed {', '.join(wanted)} in {seconds} s")
    return Prepared(server.name, venv / "bin" / "python", wanted, seconds, False)


def _site_packages(python: Path, server: NemoServer) -> Path:
    found = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], server
    )
    return Path(found.strip())


def _run(command: list[str], server: NemoServer) -> str:
    # pip's own settings (its index, without a credential word), never gymflow's keys
    env = child_env(prefixes=("PIP_", "UV_"), set_to={"PYTHONPATH": ""})
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        output = done.stderr + done.stdout
        missing = _NOT_FOUND.search(output)
        if missing:
            raise PrepareError(
                f"NeMo Gym server {server.name} needs {missing.group(1)} (its requirements), "
                "which no registry pip is set to use has: it does not run here"
            )
        raise PrepareError(
            f"preparing NeMo Gym server {server.name}: `{' '.join(command[:6])} ...` failed: "
            f"{output.strip()[-1500:]}"
        )
    return done.stdout
