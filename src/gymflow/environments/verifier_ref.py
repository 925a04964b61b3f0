"""What a verifier worker (gymflow.verifiers.pool) rebuilds an environment's resources server
from, so the verifier is never sent to it as a pickled closure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.environments.entrypoint import EnvironmentSource, build_environment
from gymflow.environments.manifest import Described, EnvironmentManifest
from gymflow.verifiers.pool import Verifying


@dataclass(frozen=True, slots=True)
class VerifierRef:
    """What a worker needs to rebuild a resources server: the environment's folder and manifest
    (the manifest as the parent holds it, which a caller may have changed from the file's) and
    the verifier parameters, all canonical JSON so equal references share a built server."""

    environment: str
    folder: str
    manifest_json: str
    params_json: str

    @classmethod
    def of(cls, env: Described, params: dict[str, Any]) -> VerifierRef:
        return cls(
            env.name,
            str(env.folder),
            env.manifest.model_dump_json(),
            json.dumps(params, sort_keys=True, default=str),
        )

    def build(self) -> Verifying:
        """The resources server, rebuilt from the environment's entry point (which registers
        the environment's own verifiers on import)."""
        manifest = EnvironmentManifest.model_validate_json(self.manifest_json)
        source = EnvironmentSource(manifest, Path(self.folder))
        return build_environment(source).resources_server(json.loads(self.params_json))
