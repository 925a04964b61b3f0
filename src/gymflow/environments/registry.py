"""Finding environments and benchmarks: the shipped ones, a user folder, and entry points."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from gymflow.core import bounded_yaml
from gymflow.core.config import Sampling, format_validation_error
from gymflow.core.credentials import named_servers
from gymflow.core.registry import (
    Registry,
    RegistryError,
    UnknownName,
    beyond_data_fields,
    entry_point_objects,
)
from gymflow.environments.base import Environment
from gymflow.environments.benchmark import Benchmark
from gymflow.environments.dataset.environment import DatasetEnvironment
from gymflow.environments.entrypoint import EnvironmentSource, entrypoint_class, read_manifest
from gymflow.environments.nemo_gym.folder import nemo_servers
from gymflow.environments.nemo_gym.folder import roots as nemo_roots
from gymflow.verifiers.base import VERIFIERS

if TYPE_CHECKING:
    from gymflow.environments.nemo_gym.environment import NemoGymEnvironment

#: The environments and benchmarks gymflow ships (`gymflow.builtin`), searched first. A folder
#: found by its place, as a user's own are, not imported: that package sits above this framework.
BUILTIN_DIR = Path(__file__).resolve().parents[1] / "builtin"
#: Extra folders (os.pathsep-separated) holding environment folders and a `benchmarks/` folder.
#: An environment's module is imported from there: code the user trusts, never a run's folder.
PATH_VARIABLE = "GYMFLOW_ENVIRONMENTS_PATH"
#: Extra folders (os.pathsep-separated) searched for `benchmarks/*.yaml` only: benchmark files
#: and the rows and task folders they name, which are data. No environment is ever found (so no
#: module imported) there: `gym data select` writes a selection into a run folder, which anyone
#: who can write that folder also fills, and a folder of it on the environments path ran their
#: Python as the owner (attack pass 4, a08).
BENCHMARKS_VARIABLE = "GYMFLOW_BENCHMARKS_PATH"
ENTRY_POINT_GROUP = "gymflow.environments"

# re-exported: callers catch the errors, and read benchmarks and manifests, from here
__all__ = [
    "Benchmark",
    "EnvironmentSource",
    "RegistryError",
    "UnknownName",
    "load_benchmark",
    "load_entrypoint",
    "load_environment",
    "read_manifest",
]


def _listed(variable: str) -> list[Path]:
    return [Path(p).expanduser() for p in os.environ.get(variable, "").split(os.pathsep) if p]


def search_roots() -> list[Path]:
    """The folders environments (code) and benchmarks are found in: gymflow's own,
    `GYMFLOW_ENVIRONMENTS_PATH`, then installed packages'."""
    roots = [BUILTIN_DIR, *_listed(PATH_VARIABLE)]
    for target in entry_point_objects(ENTRY_POINT_GROUP):
        roots.append(Path(target() if callable(target) else target))
    return roots


def benchmark_roots() -> list[Path]:
    """The folders whose `benchmarks/` holds benchmark files: `search_roots`, then the
    benchmark-only folders of `GYMFLOW_BENCHMARKS_PATH`."""
    return [*search_roots(), *_listed(BENCHMARKS_VARIABLE)]


@contextmanager
def on_search_path(
    root: Path | str, *, benchmarks_only: bool = False, vetted: bool = False
) -> Iterator[None]:
    """`root` searched ahead of the user's path while the block runs: for environments and
    benchmarks (a run's environment folder unpacked on a worker), or with `benchmarks_only`
    for benchmark files alone (a benchmark file named on the command line, the benchmark and
    data a run's bundle carries). `vetted`: its benchmarks were checked as data already (a
    bundle's, where its run was planned), so they may choose what data may not (`beyond_data`)."""
    variable = BENCHMARKS_VARIABLE if benchmarks_only else PATH_VARIABLE
    saved = os.environ.get(variable)
    os.environ[variable] = os.pathsep.join(p for p in (str(root), saved) if p)
    if vetted:
        _vetted.append(Path(root).resolve())
    try:
        yield
    finally:
        if vetted:
            _vetted.remove(Path(root).resolve())
        if saved is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = saved


def _defined_twice(kind: str, name: str, paths: list[Path]) -> RegistryError:
    # The first would be used and the user's own edited copy silently ignored.
    return RegistryError(
        f"{kind} {name!r} is defined twice: {paths[0]} and {paths[1]}; rename one "
        "(its `name:` and file or folder) so a run says which it used"
    )


def _distinct(paths: list[Path]) -> list[Path]:
    """`paths` without a file or folder reached twice (through two roots or a link)."""
    seen: dict[Path, Path] = {}
    for path in paths:
        seen.setdefault(path.resolve(), path)
    return list(seen.values())


@cache
def _definitions(roots: tuple[Path, ...]) -> dict[str, list[EnvironmentSource]]:
    """Every environment folder under `roots` by manifest name, in search order (the shipped
    environments, then the user's path, then installed packages)."""
    folders: dict[Path, EnvironmentSource] = {}
    for root in roots:
        candidates = [root] if (root / "environment.yaml").exists() else sorted(root.glob("*/"))
        for folder in candidates:
            manifest_path = folder / "environment.yaml"
            if manifest_path.exists() and folder.resolve() not in folders:
                folders[folder.resolve()] = EnvironmentSource(read_manifest(manifest_path), folder)
    found: dict[str, list[EnvironmentSource]] = {}
    for source in folders.values():
        found.setdefault(source.manifest.name, []).append(source)
    return found


@cache
def _sources(roots: tuple[Path, ...]) -> Registry[EnvironmentSource]:
    """The environments under `roots` by name; one that two folders define is refused when
    loaded (`_load_environment`), not when listed."""
    found: Registry[EnvironmentSource] = Registry("environment")
    for name, sources in _definitions(roots).items():
        found.register(name, sources[0])
    return found


def environment_sources() -> dict[str, EnvironmentSource]:
    """gymflow's environments, then the NeMo Gym ones of `GYMFLOW_NEMO_GYM_PATH`."""
    found = _sources(tuple(search_roots()))
    sources = {name: found.get(name) for name in found.names()}
    for name, source in _nemo_sources(nemo_roots()).items():
        sources.setdefault(name, source)
    return sources


@cache
def _nemo_sources(search: tuple[Path, ...]) -> dict[str, EnvironmentSource]:
    return {name: EnvironmentSource(s.manifest(), s.folder) for name, s in nemo_servers().items()}


def load_entrypoint(source: EnvironmentSource) -> type[Environment]:
    """The Environment class a manifest's `entrypoint` (`module:Class`) names in its folder.
    Raises RegistryError naming the file, also when what it names is no Environment class."""
    found = entrypoint_class(source)
    if not (isinstance(found, type) and issubclass(found, Environment)):
        raise RegistryError(
            f"{source.folder / source.manifest.entrypoint.partition(':')[0]}.py: "
            f"{source.manifest.entrypoint!r} is not an Environment class"
        )
    return found


@cache
def _load_environment(
    name: str, roots: tuple[Path, ...], benchmarks: tuple[Path, ...], nemo: tuple[Path, ...]
) -> Environment:
    # every search path keys the cache: a dataset benchmark's environment comes from its file,
    # a NeMo Gym one from the server folders of `nemo`
    sources = _sources(roots)
    if name not in sources:
        dataset_env = _dataset_environment(name)
        if dataset_env is not None:
            return dataset_env
        server = nemo_servers().get(name)
        if server is not None:
            return _nemo_gym_environment()(server)
    source = sources.get(name)  # raises UnknownName
    defined = _definitions(roots)[name]
    if len(defined) > 1:
        raise _defined_twice("environment", name, [d.folder for d in defined])
    return load_entrypoint(source)(source.manifest, source.folder)


def _dataset_environment(name: str) -> Environment | None:
    """The environment a dataset benchmark of this name defines, if there is one."""
    path = benchmark_files().get(name)
    if path is None:
        return None
    benchmark = load_benchmark(name)
    if benchmark.workspace is not None:
        from gymflow.environments.workspace.environment import WorkspaceEnvironment

        try:
            return WorkspaceEnvironment.from_benchmark(benchmark, path)
        except ValueError as exc:
            raise RegistryError(f"{path}: {exc}") from None
    if benchmark.dataset is None:
        return None
    # a NeMo Gym server as the verifier: the benchmark's rows run on that environment's server
    nemo_gym = benchmark.verifier is not None and benchmark.verifier.name == "nemo_gym"
    kind = _nemo_gym_environment() if nemo_gym else DatasetEnvironment
    try:
        return kind.from_benchmark(benchmark, path)
    except ValueError as exc:
        raise RegistryError(f"{path}: {exc}") from None


def _nemo_gym_environment() -> type[NemoGymEnvironment]:
    # Imported for a NeMo Gym name only: the module brings the model boundary's response shapes,
    # which listing or loading any other environment does not need (no cycle: it imports
    # nothing of this module).
    from gymflow.environments.nemo_gym.environment import NemoGymEnvironment

    return NemoGymEnvironment


def load_environment(name: str) -> Environment:
    """The environment named `name`, from the search roots (gymflow's own, then
    `GYMFLOW_ENVIRONMENTS_PATH`, then installed packages), or the one a dataset or workspace
    benchmark of that name defines; raises UnknownName with what exists."""
    return _load_environment(name, tuple(search_roots()), tuple(benchmark_roots()), nemo_roots())


def _benchmark_paths() -> dict[str, list[Path]]:
    """Every benchmark file by name, in search order (one file reached twice counts once)."""
    paths: dict[str, list[Path]] = {}
    for root in benchmark_roots():
        for path in sorted((root / "benchmarks").glob("*.yaml")):
            paths.setdefault(path.stem, []).append(path)
    return {name: _distinct(found) for name, found in paths.items()}


def benchmark_files() -> dict[str, Path]:
    return {name: paths[0] for name, paths in _benchmark_paths().items()}


def load_benchmark(name: str) -> Benchmark:
    paths = _benchmark_paths()
    if name not in paths:
        raise UnknownName("benchmark", name, {n: p[0] for n, p in paths.items()})
    path = paths[name][0]
    if len(paths[name]) > 1:
        raise _defined_twice("benchmark", name, paths[name])
    try:
        data = bounded_yaml.safe_load(bounded_yaml.read_text(path))
        benchmark = Benchmark.model_validate(data)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: malformed YAML: {exc}") from None
    except ValidationError as exc:
        raise RegistryError(format_validation_error(exc, str(path))) from None
    if _data_only(path):
        beyond = beyond_data(data, benchmark)
        if beyond:
            raise RegistryError(
                f"{path}: {beyond}, and a benchmark on {BENCHMARKS_VARIABLE} is data from a "
                "folder you may not have written (a run's): read it, copy the folder somewhere "
                f"only you write, and put that on {PATH_VARIABLE} to trust it as your own"
            )
    return benchmark


#: The benchmark roots of the bundles being read (`on_search_path(vetted=True)`).
_vetted: list[Path] = []


def _data_only(path: Path) -> bool:
    """Whether the benchmark file was found only through `GYMFLOW_BENCHMARKS_PATH`: data."""
    root = path.parent.parent.resolve()
    trusted = {*(r.resolve() for r in search_roots()), *_vetted}
    return root not in trusted and root in {r.resolve() for r in _listed(BENCHMARKS_VARIABLE)}


def beyond_data(data: Any, benchmark: Benchmark) -> str | None:
    """What a benchmark file sets or chooses that data from anyone must not, in words (None:
    nothing). A benchmark on the data path (a selection in a run folder, which whoever can write
    the folder also fills) is read by an allow-list: it may set only the fields its model marks
    as data (`gymflow.core.registry.FromData`), choose a verifier or harness only among those
    registered `for_data` (they read a row as data, never run it as code nor start a server)
    and an environment only among those installed or on the environments path, and name no
    server, where a run sends the owner's keys. What a deny-list let through: `code_exec` over
    rows of the writer's own (attack pass 7, s01), a harness `module:attr` imported in gymflow's
    process, a NeMo Gym server that runs a row's test code on the host (attack pass 8, F2, F4)."""
    for field, marker, value in beyond_data_fields(benchmark):
        if marker is None or marker.chooses is None:
            return f"{field}: not data (what it names runs as code)"
        allowed = _for_data(marker.chooses, benchmark)
        if value not in allowed:
            kind = ("an " if marker.chooses[0] in "aeiou" else "a ") + marker.chooses
            return (
                f"{field}: {value!r} is not {kind} a data file may choose "
                f"(only {', '.join(allowed) or 'none'})"
            )
    servers = named_servers(data)
    if servers:
        return f"it names a server ({servers[0]}), where a run would send your keys"
    return None


def _for_data(kind: str, benchmark: Benchmark) -> list[str]:
    """The names data-path `benchmark` may choose for a field of `kind` (`FromData.chooses`):
    from the component's registry, never a list of names of this module's own."""
    if kind == "verifier":
        return VERIFIERS.for_data()
    if kind == "harness":
        # imported here: listing or loading environments needs no harness (nor its model client)
        from gymflow.harness.base import HARNESSES

        return HARNESSES.for_data()
    if kind == "environment":
        # code the owner installed or put on the environments path, with its own rows, or the
        # one a dataset or workspace benchmark defines, its own name; never a NeMo Gym server's
        # (a process the row data would choose), which any other name could resolve to
        defines = benchmark.dataset is not None or benchmark.workspace is not None
        own = [benchmark.name] if defines else []
        return sorted({*_sources(tuple(search_roots())).names(), *own})
    raise ValueError(f"no registry of {kind!r} components")


def with_benchmark_sampling(data: dict[str, Any]) -> dict[str, Any]:
    """A config mapping whose `sampling:` names some settings, with the benchmark's for the
    others: a config file, a flag or a study variant setting one sampling key changes that one
    only (vary one thing at a time), never resetting the rest to the defaults."""
    if not isinstance(data.get("sampling"), dict):
        return data
    return data | {
        "sampling": benchmark_sampling(data.get("benchmark")).model_dump() | data["sampling"]
    }


def benchmark_sampling(name: Any) -> Sampling:
    """The sampling a config naming benchmark `name` and no sampling of its own runs with: the
    benchmark's; the defaults when it names none or no known one (the config's own check then
    says which)."""
    if not isinstance(name, str):
        return Sampling()
    try:
        return load_benchmark(name).sampling
    except RegistryError:
        return Sampling()
