"""Finding NeMo Gym environments in folders laid out as NeMo Gym's repository (and its wheel):
`resources_servers/<name>/app.py`, `configs/*.yaml`, `data/*.jsonl`.

Each config file of a server is one environment, named `ng-<server>` (`ng-<server>-<config>`
when the config's name is not the server's): its description, domain and parameters are the
config's, and its splits are the datasets the config lists whose files exist (NeMo Gym commits
only `example`; a user downloads or writes the others). The folders come from
`GYMFLOW_NEMO_GYM_PATH` (`os.pathsep`-separated); the `nemo-gym` wheel ships its servers in
site-packages, so a venv's site-packages is such a folder."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import yaml

from gymflow.core import bounded_yaml
from gymflow.environments.manifest import EnvironmentManifest, SplitSpec, VerifierRef

PATH_VARIABLE = "GYMFLOW_NEMO_GYM_PATH"
#: The prefix of every NeMo Gym environment's name, so none shadows one of gymflow's.
PREFIX = "ng-"
#: Config keys that describe the server rather than parameterise it.
DESCRIPTIVE = ("entrypoint", "domain", "verified", "description", "value", "host", "port")


@dataclass(frozen=True)
class NemoServer:
    """One resources server under one of its config files."""

    name: str  # the folder's name, e.g. mcqa
    root: Path  # the folder holding resources_servers/
    config_file: Path
    instance: str  # the config's key for this server instance
    fields: dict[str, Any]  # its resources_servers.<name> mapping
    splits: dict[str, Path]  # dataset name -> JSONL file, the existing ones

    @property
    def folder(self) -> Path:
        return self.root / "resources_servers" / self.name

    @property
    def env_name(self) -> str:
        stem = self.config_file.stem
        base = self.name if stem == self.name else f"{self.name}-{stem}"
        return PREFIX + re.sub(r"[^a-z0-9_\-]", "-", base.lower())

    @property
    def params(self) -> dict[str, Any]:
        return {k: v for k, v in self.fields.items() if k not in DESCRIPTIVE}

    def code_hash(self) -> str:
        """The server's own modules and its config file as they are on disk: an edited app.py
        or config is another server, so another verifier version."""
        digest = hashlib.sha256()
        files = sorted(self.folder.glob("*.py"))  # its modules; tests and data left out
        for path in [*files, self.config_file]:
            digest.update(str(path.relative_to(self.folder)).encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    def manifest(self) -> EnvironmentManifest:
        domain = str(self.fields.get("domain") or "nemo_gym")
        description = str(self.fields.get("description") or f"NeMo Gym's {self.name} server")
        default = "example" if "example" in self.splits else next(iter(self.splits))
        tags = ["nemo_gym", domain, *(["verified"] if self.fields.get("verified") else [])]
        return EnvironmentManifest(
            name=self.env_name,
            description=f"{description} (NeMo Gym resources server {self.name})",
            domain=domain,
            tags=list(dict.fromkeys(tags)),
            tools=sorted(_tool_names(self.splits[default])),
            verifier=VerifierRef(
                name="nemo_gym",
                params={"server": self.name, "code": self.code_hash(), "config": self.params},
            ),
            # NeMo Gym's servers judge on live session state unless they say otherwise
            # (GET /reverify_mode): `gym eval reverify` asks the server itself
            reverify_stateless=False,
            harness="tool_loop" if _tool_names(self.splits[default]) else "single_turn",
            prompt_template="{{ prompt }}",
            splits={
                name: SplitSpec(
                    description=str(
                        path.relative_to(self.root) if path.is_relative_to(self.root) else path
                    )
                )
                for name, path in self.splits.items()
            },
            default_split=default,
            id_field="(content hash)",
            entrypoint="(nemo_gym)",
        )


def _tool_names(path: Path) -> set[str]:
    """The tools the first row of a dataset offers (NeMo Gym's rows of one server share them)."""
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    row = orjson.loads(line)
                    tools = (row.get("responses_create_params") or {}).get("tools") or []
                    return {t["name"] for t in tools if isinstance(t, dict) and "name" in t}
                except (orjson.JSONDecodeError, AttributeError, TypeError):
                    return set()  # the rows' own checks name the problem when they are read
    return set()


def roots() -> tuple[Path, ...]:
    return tuple(
        Path(p).expanduser() for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p
    )


def _servers_in(root: Path, config_file: Path) -> list[NemoServer]:
    try:
        data = bounded_yaml.safe_load(bounded_yaml.read_text(config_file)) or {}
    except (OSError, yaml.YAMLError):
        return []  # not a config NeMo Gym could read either
    if not isinstance(data, dict):
        return []
    name = config_file.parent.parent.name
    datasets: dict[str, list[dict[str, Any]]] = {}
    blocks = {k: v for k, v in data.items() if isinstance(v, dict)}  # skip top-level settings
    for block in blocks.values():
        for agent in (block.get("responses_api_agents") or {}).values():
            if isinstance(agent, dict):
                ref = (agent.get("resources_server") or {}).get("name")
                datasets.setdefault(ref, []).extend(agent.get("datasets") or [])
    found = []
    for instance, block in blocks.items():
        fields = (block.get("resources_servers") or {}).get(name)
        if not isinstance(fields, dict):
            continue
        splits = {
            str(d["name"]): root / d["jsonl_fpath"]
            for d in datasets.get(instance, [])
            if isinstance(d, dict)
            and d.get("name")
            and (root / str(d.get("jsonl_fpath"))).is_file()
        }
        if splits:  # a server with no dataset file here has nothing to run
            found.append(NemoServer(name, root, config_file, instance, fields, splits))
    return found


@cache
def _servers(search: tuple[Path, ...]) -> dict[str, NemoServer]:
    found: dict[str, NemoServer] = {}
    for root in search:
        for config_file in sorted(root.glob("resources_servers/*/configs/*.yaml")):
            if not (config_file.parent.parent / "app.py").is_file():
                continue
            for server in _servers_in(root, config_file):
                found.setdefault(server.env_name, server)  # the first folder to hold it wins
    return found


def nemo_servers() -> dict[str, NemoServer]:
    """Every NeMo Gym environment under the folders of `GYMFLOW_NEMO_GYM_PATH`, by name."""
    return _servers(roots())
