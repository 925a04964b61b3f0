"""Finding environments and benchmarks: the shipped ones, a user folder, and entry points."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gymflow import bounded_yaml
from gymflow.config import MAX_REPEATS, Sampling, format_validation_error
from gymflow.environments.base import Environment, EnvironmentManifest, VerifierRef
from gymflow.environments.dataset.spec import DatasetSpec
from gymflow.environments.nemo_gym.folder import nemo_servers
from gymflow.environments.nemo_gym.folder import roots as nemo_roots
from gymflow.registry import (
    Registry,
    RegistryError,
    UnknownName,
    entry_point_objects,
    import_from_file,
)

if TYPE_CHECKING:
    pass

PACKAGE_DIR = Path(__file__).parent
#: Extra folders (os.pathsep-separated) holding environment folders and a `benchmarks/` folder.
PATH_VARIABLE = "GYMFLOW_ENVIRONMENTS_PATH"
ENTRY_POINT_GROUP = "gymflow.environments"


__all__ = ["RegistryError", "UnknownName"]  # re-exported: callers catch them from here


class Benchmark(BaseModel):
    """A versioned evaluation protocol over an environment (`benchmarks/NAME.yaml`).

    With `dataset` (and `verifier`) the benchmark defines its own environment, named after it,
    over the rows of a file or a Hub dataset (`gymflow.environments.dataset`)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    environment: str = Field("", description="the environment; a dataset benchmark's own name")
    dataset: DatasetSpec | None = None
    verifier: VerifierRef | None = Field(None, description="a dataset benchmark's verifier")
    split: str | None = None
    limit: int | None = Field(None, ge=1)
    prompt_template: str | None = None
    repeats: int = Field(1, ge=1, le=MAX_REPEATS)
    sampling: Sampling = Sampling()
    verifier_params: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _environment(self) -> Benchmark:
        if self.dataset is None:
            if not self.environment:
                raise ValueError("environment: required (or give a dataset and a verifier)")
            if self.verifier is not None:
                raise ValueError("verifier: only a dataset benchmark names its verifier")
            return self
        if self.verifier is None:
            raise ValueError("verifier: a dataset benchmark names its verifier")
        if self.environment not in ("", self.name):
            raise ValueError(
                f"environment: a dataset benchmark defines its own environment, {self.name!r}"
            )
        self.environment = self.name
        return self

    def version(self, dataset_version: str | None = None) -> str:
        """A change to split, template, repeats, sampling or verifier params is a new version;
        for a dataset benchmark, so is a change to its rows (`dataset_version`, which covers the
        Hub commit), shown after a dot so a comparison can tell that only the rows changed."""
        protocol = self.model_dump(mode="json", exclude={"description", "tags"})
        if self.dataset is not None:  # where the file lies is not the protocol; its rows are
            protocol["dataset"].pop("path")
            if protocol["dataset"]["format"] != "nemo_gym":  # the same rows in any file format
                protocol["dataset"].pop("format")
        digest = hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()[:12]
        return f"{digest}.{dataset_version}" if dataset_version else digest


@dataclass(frozen=True)
class EnvironmentSource:
    manifest: EnvironmentManifest
    folder: Path


def search_roots() -> list[Path]:
    roots = [PACKAGE_DIR]
    for part in os.environ.get(PATH_VARIABLE, "").split(os.pathsep):
        if part:
            roots.append(Path(part).expanduser())
    for target in entry_point_objects(ENTRY_POINT_GROUP):
        roots.append(Path(target() if callable(target) else target))
    return roots


@contextmanager
def on_search_path(root: Path | str) -> Iterator[None]:
    """`root` searched for environments and benchmarks ahead of the user's path, while the
    block runs (a benchmark file's own folder, a run's bundle unpacked on a worker)."""
    saved = os.environ.get(PATH_VARIABLE)
    os.environ[PATH_VARIABLE] = os.pathsep.join(p for p in (str(root), saved) if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(PATH_VARIABLE, None)
        else:
            os.environ[PATH_VARIABLE] = saved


def read_manifest(path: Path) -> EnvironmentManifest:
    try:
        data = bounded_yaml.safe_load(bounded_yaml.read_text(path))
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"{path}: cannot read manifest: {exc}") from None
    try:
        return EnvironmentManifest.model_validate(data)
    except ValidationError as exc:
        raise RegistryError(format_validation_error(exc, str(path))) from None


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
    Importing the module registers the environment's own verifiers, so a verifier worker
    rebuilds an environment with this. Raises RegistryError naming the file."""
    module_name, _, class_name = source.manifest.entrypoint.partition(":")
    path = source.folder / f"{module_name}.py"
    qualified = f"gymflow_env_{source.manifest.name.replace('-', '_')}_{module_name}"
    try:
        return import_from_file(path, qualified, class_name)
    except RegistryError as exc:
        raise RegistryError(f"{exc} (manifest entrypoint {source.manifest.entrypoint!r})") from None


@cache
def _load_environment(name: str, roots: tuple[Path, ...]) -> Environment:
    sources = _sources(roots)
    if name not in sources:
        dataset_env = _dataset_environment(name)
        if dataset_env is not None:
            return dataset_env
        server = nemo_servers().get(name)
        if server is not None:
            from gymflow.environments.nemo_gym.environment import NemoGymEnvironment

            return NemoGymEnvironment(server)
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
    if benchmark.dataset is None:
        return None
    from gymflow.environments.dataset.environment import DatasetEnvironment
    from gymflow.environments.nemo_gym.environment import NemoGymEnvironment

    # a NeMo Gym server as the verifier: the benchmark's rows run on that environment's server
    kind = NemoGymEnvironment if benchmark.verifier.name == "nemo_gym" else DatasetEnvironment
    try:
        return kind.from_benchmark(benchmark, path)
    except ValueError as exc:
        raise RegistryError(f"{path}: {exc}") from None


def load_environment(name: str) -> Environment:
    return _load_environment(name, tuple(search_roots()))


def _benchmark_paths() -> dict[str, list[Path]]:
    """Every benchmark file by name, in search order (one file reached twice counts once)."""
    paths: dict[str, list[Path]] = {}
    for root in search_roots():
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
        return Benchmark.model_validate(data)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: malformed YAML: {exc}") from None
    except ValidationError as exc:
        raise RegistryError(format_validation_error(exc, str(path))) from None


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
