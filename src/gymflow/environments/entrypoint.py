"""An environment folder's code: its manifest read, and the class its `entrypoint` names imported.

Below `base`, so a verifier worker's reference (`verifier_ref`) can rebuild an environment with
it; what it returns is therefore typed by what the worker calls on it (`Buildable`), and
`registry.load_entrypoint` checks that the class is an `Environment`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import ValidationError

from gymflow.core import bounded_yaml
from gymflow.core.config import format_validation_error
from gymflow.core.registry import RegistryError, import_from_file
from gymflow.environments.manifest import EnvironmentManifest
from gymflow.verifiers.pool import Verifying


@dataclass(frozen=True)
class EnvironmentSource:
    manifest: EnvironmentManifest
    folder: Path


class Buildable(Protocol):
    """An environment as a verifier worker uses it: the maker of its resources server."""

    def resources_server(self, verifier_params: dict[str, Any] | None = None) -> Verifying: ...


def read_manifest(path: Path) -> EnvironmentManifest:
    try:
        data = bounded_yaml.safe_load(bounded_yaml.read_text(path))
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"{path}: cannot read manifest: {exc}") from None
    try:
        return EnvironmentManifest.model_validate(data)
    except ValidationError as exc:
        raise RegistryError(format_validation_error(exc, str(path))) from None


def entrypoint_class(source: EnvironmentSource) -> Callable[[EnvironmentManifest, Path], Any]:
    """What a manifest's `entrypoint` (`module:Class`) names in its folder. Importing the module
    registers the environment's own verifiers, so a verifier worker rebuilds an environment with
    this. Raises RegistryError naming the file."""
    module_name, _, class_name = source.manifest.entrypoint.partition(":")
    path = source.folder / f"{module_name}.py"
    qualified = f"gymflow_env_{source.manifest.name.replace('-', '_')}_{module_name}"
    try:
        return import_from_file(path, qualified, class_name)
    except RegistryError as exc:
        raise RegistryError(f"{exc} (manifest entrypoint {source.manifest.entrypoint!r})") from None


def build_environment(source: EnvironmentSource) -> Buildable:
    """The environment `source` describes, as a verifier worker uses it."""
    return entrypoint_class(source)(source.manifest, source.folder)
