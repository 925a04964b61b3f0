"""Serve one NeMo Gym resources server's FastAPI app on 127.0.0.1, without Ray or a head server.

Run by NeMo Gym's own interpreter (a venv with `nemo-gym`), never imported by gymflow: it imports
nothing of gymflow's. NeMo Gym's `run_webserver` starts Ray (which binds every interface) and asks
a head server for its config; this builds the server as NeMo Gym's own tests do (its config model
from the server's YAML, a stand-in `ServerClient`), takes the app `setup_webserver` makes, and
runs it with uvicorn on a socket bound to 127.0.0.1. The port is printed as one JSON line once the
socket listens, so the caller never races for a free port.

    python serve_app.py ROOT SERVER CONFIG_YAML INSTANCE [--port N]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import socket
import sys
from pathlib import Path
from unittest.mock import MagicMock


def _server_class(module):
    from nemo_gym.base_resources_server import SimpleResourcesServer

    found = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, SimpleResourcesServer)
        and obj.__module__ == module.__name__
    ]
    if len(found) != 1:
        names = [c.__name__ for c in found]
        raise SystemExit(f"{module.__file__}: expected one resources server class, found {names}")
    return found[0]


def _instance_fields(config_yaml: Path, instance: str, server: str) -> dict:
    import yaml

    data = yaml.safe_load(config_yaml.read_text()) or {}
    fields = ((data.get(instance) or {}).get("resources_servers") or {}).get(server)
    if not isinstance(fields, dict):
        raise SystemExit(f"{config_yaml}: no resources_servers.{server} under {instance!r}")
    return fields


def build_app(root: Path, server: str, config: Path, instance: str, port: int):
    """The server's FastAPI app, built as NeMo Gym's own tests build it. Its folder is on the
    path too, as NeMo Gym runs it (`import utils` beside app.py)."""
    sys.path[:0] = [str((root / "resources_servers" / server).resolve()), str(root.resolve())]
    module = importlib.import_module(f"resources_servers.{server}.app")
    cls = _server_class(module)
    config_cls = cls.model_fields["config"].annotation
    fields = {
        **_instance_fields(config, instance, server),
        "host": "127.0.0.1",
        "port": port,
        "name": instance,
    }
    from nemo_gym.server_utils import ServerClient

    built = cls(
        config=config_cls.model_validate(fields), server_client=MagicMock(spec=ServerClient)
    )
    return built.setup_webserver(), cls.__name__


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path, help="the folder holding resources_servers/")
    parser.add_argument("server")
    parser.add_argument("config", type=Path)
    parser.add_argument("instance")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app, name = build_app(args.root, args.server, args.config, args.instance, port)

    import uvicorn

    sock.listen(128)
    print(json.dumps({"port": port, "server": name}), flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
