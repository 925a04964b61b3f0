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
from gymflow.environments.nemo_gym import index

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
    def asks_judge(self) -> bool:
        """Whether the server asks a model itself (a judge): its config names a
        `responses_api_models` server or interpolates the policy's or a judge's URL."""
        return _asks_model(self.fields)

    def reward_range(self) -> tuple[float, float]:
        """NeMo Gym's servers declare no reward range (`reward: float`): the unit range widened
        to every reward the server's own recorded rollouts beside its datasets hold (blackjack's
        -1, example_tool_call_multireward's 2). A run also takes the bounds the server's
        `/verify` schema declares, when it declares some (resources.declared_reward_range)."""
        low, high = 0.0, 1.0
        for path in self.splits.values():
            recorded = path.with_name(f"{path.stem}_rollouts.jsonl")
            for reward in _recorded_rewards(recorded):
                low, high = min(low, reward), max(high, reward)
        return low, high

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
        key = self._key()
        if key not in _manifests:
            _manifests[key] = self._manifest()
        return _manifests[key]

    def _key(self) -> tuple:
        return (self.config_file, self.instance, tuple(sorted(map(str, self.splits.items()))))

    def _manifest(self) -> EnvironmentManifest:
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
            harness=(
                "tool_loop"
                if _tool_names(self.splits[default]) or _serves_mcp(self.folder)
                else "single_turn"
            ),
            reward_range=self.reward_range(),
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


def _asks_model(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("type") == "responses_api_models" or any(
            _asks_model(v) for v in value.values()
        )
    if isinstance(value, list):
        return any(_asks_model(v) for v in value)
    return isinstance(value, str) and ("${policy_" in value or "${judge_" in value)


def _serves_mcp(folder: Path) -> bool:
    """Whether the server is one of NeMo Gym's MCPResourcesServers, read from its code: its rows
    offer no tools, it serves them over MCP (resources.NemoGymResources lists them), so it is
    run in a tool loop."""
    return any(
        "MCPResourcesServer" in path.read_text(errors="replace") for path in folder.glob("*.py")
    )


def _recorded_rewards(path: Path) -> list[float]:
    if not path.is_file():
        return []
    rewards = []
    for line in path.read_bytes().splitlines():
        try:
            reward = orjson.loads(line).get("reward")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(reward, int | float) and not isinstance(reward, bool) and abs(reward) < 1e9:
            rewards.append(round(float(reward), 9))
    return rewards


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


#: Each server's manifest, built once per process (or read from the index).
_manifests: dict[tuple, EnvironmentManifest] = {}


@cache
def _servers(search: tuple[Path, ...]) -> dict[str, NemoServer]:
    found: dict[str, NemoServer] = {}
    for root in search:
        for server in _servers_of(root):
            found.setdefault(server.env_name, server)  # the first folder to hold it wins
    return found


def _servers_of(root: Path) -> list[NemoServer]:
    """The folder's servers, from its index when the files it read are unchanged."""
    key = index.fingerprint(root)
    entries = index.load(root, key)
    if entries is not None:
        servers = []
        for entry in entries:
            server = NemoServer(
                entry["name"], root, Path(entry["config_file"]), entry["instance"],
                entry["fields"], {k: Path(v) for k, v in entry["splits"].items()},
            )  # fmt: skip
            _manifests[server._key()] = EnvironmentManifest.model_validate(entry["manifest"])
            servers.append(server)
        return servers
    servers = [
        server
        for config_file in sorted(root.glob("resources_servers/*/configs/*.yaml"))
        if (config_file.parent.parent / "app.py").is_file()
        for server in _servers_in(root, config_file)
    ]
    index.save(root, key, [
        {"name": s.name, "config_file": str(s.config_file), "instance": s.instance,
         "fields": s.fields, "splits": {k: str(v) for k, v in s.splits.items()},
         "manifest": s.manifest().model_dump(mode="json")}
        for s in servers
    ])  # fmt: skip
    return servers


def unlisted() -> dict[str, str]:
    """Every server folder under the search path that gives no environment, with the reason
    (`gym list environments` shows them): no config, no dataset in its configs, datasets whose
    files are absent, or datasets an agent runs on another server's instance (a wrapper, as
    rdkit_chemistry is run through ns_tools)."""
    listed = {server.folder for server in nemo_servers().values()}
    reasons: dict[str, str] = {}
    for root in roots():
        for app in sorted(root.glob("resources_servers/*/app.py")):
            folder = app.parent
            if folder in listed or folder.name in reasons:
                continue
            reasons[folder.name] = _why_unlisted(root, folder)
    return reasons


def _why_unlisted(root: Path, folder: Path) -> str:
    configs = sorted(folder.glob("configs/*.yaml"))
    if not configs:
        return "no config in configs/"
    wrapped, absent, listed_any = set(), set(), False
    for config_file in configs:
        try:
            data = bounded_yaml.safe_load(bounded_yaml.read_text(config_file)) or {}
        except (OSError, yaml.YAMLError) as exc:
            return f"{config_file.name} does not read as YAML: {str(exc).splitlines()[0]}"
        blocks = {k: v for k, v in data.items() if isinstance(v, dict)}
        for block in blocks.values():
            for agent in (block.get("responses_api_agents") or {}).values():
                if not isinstance(agent, dict) or not agent.get("datasets"):
                    continue
                listed_any = True
                ref = (agent.get("resources_server") or {}).get("name")
                target = (blocks.get(ref) or {}).get("resources_servers") or {}
                if folder.name not in target:
                    wrapped.add(f"{ref} ({', '.join(target) or 'not in this config'})")
                absent.update(
                    str(d.get("jsonl_fpath"))
                    for d in agent["datasets"]
                    if isinstance(d, dict) and not (root / str(d.get("jsonl_fpath"))).is_file()
                )
    if wrapped:
        return (
            f"its datasets run on another server, {', '.join(sorted(wrapped))}, which wraps "
            "it: a pair of servers, which gymflow does not start together"
        )
    if not listed_any:
        return "its configs list no dataset (NeMo Gym's agent config names none)"
    return f"its datasets' files are absent: {', '.join(sorted(absent))}"


def nemo_servers() -> dict[str, NemoServer]:
    """Every NeMo Gym environment under the folders of `GYMFLOW_NEMO_GYM_PATH`, by name."""
    return _servers(roots())
