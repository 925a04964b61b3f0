"""Serve one NeMo Gym resources server's FastAPI app on 127.0.0.1, as NeMo Gym's `run_webserver`
serves it, without Ray or a head server.

Run by NeMo Gym's own interpreter (a venv with `nemo-gym`), never imported by gymflow: it imports
nothing of gymflow's. What it keeps of `run_webserver`: the config resolved by OmegaConf (with
gymflow's own values bound to the keys NeMo Gym's global config gives: `policy_base_url`,
`judge_base_url`, ...), the liveness route, the exception middleware (a 500 carries `repr(e)`,
the traceback goes to the log) and the validation handler. What it changes:

- Ray is kept off: `ray.init` raises, naming the server (Ray binds the machine's outside
  address, and a server that needs it does not run here);
- the network is kept off: a connection or name lookup outside 127.0.0.1 raises, naming the host
  (a server that downloads at start is refused with that reason; its data is provided beforehand)
  unless `GYMFLOW_NEMO_GYM_NETWORK=1`;
- its server client reaches only the judge gymflow serves (`--judge-url`), with the rollout's
  id (the `x-gymflow-rollout` header of the `/verify` that asked) on every judge call, so each
  call is kept as that rollout's evidence; no judge configured is an error naming the setting;
- the port goes to a file descriptor of its own (`--port-fd`), once the socket listens, so
  nothing the server prints can be taken for it.

    python serve_app.py ROOT SERVER CONFIG_YAML INSTANCE [--port N] [--port-fd FD]
        [--bindings JSON] [--judge-url URL]
"""

from __future__ import annotations

import argparse
import contextvars
import importlib
import inspect
import ipaddress
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

#: The header naming the rollout a `/verify` judges; sent on to the judge with each call.
ROLLOUT_HEADER = "x-gymflow-rollout"
NETWORK_VARIABLE = "GYMFLOW_NEMO_GYM_NETWORK"
_ROLLOUT: contextvars.ContextVar[str] = contextvars.ContextVar("gymflow_rollout", default="")
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class NeedsNetwork(OSError):
    pass


def _loopback(host: object) -> bool:
    if not isinstance(host, str):
        return True  # a Unix socket path, or bytes: not a network address
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def keep_network_off(server: str) -> None:
    """Connections and name lookups outside this machine raise NeedsNetwork naming the host."""
    if os.environ.get(NETWORK_VARIABLE) == "1":
        return

    def refuse(host: object, port: object) -> NeedsNetwork:
        return NeedsNetwork(
            f"NeMo Gym server {server} tried to reach {host}:{port}: servers run without the "
            f"network under gymflow (provide its data beforehand; {NETWORK_VARIABLE}=1 allows it)"
        )

    lookup, connect, connect_ex = (
        socket.getaddrinfo,
        socket.socket.connect,
        socket.socket.connect_ex,
    )

    def getaddrinfo(host, port, *args, **kwargs):
        if host is not None and not _loopback(host.decode() if isinstance(host, bytes) else host):
            raise refuse(host, port)
        return lookup(host, port, *args, **kwargs)

    def guarded(real):
        def call(self, address):
            if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
                raise refuse(address[0], address[1])
            return real(self, address)

        return call

    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = guarded(connect)
    socket.socket.connect_ex = guarded(connect_ex)


def keep_ray_off(server: str) -> None:
    """`ray.init` raises: Ray would bind the machine's outside address."""
    os.environ.pop("RAY_ADDRESS", None)
    import ray

    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"NeMo Gym server {server} starts Ray (ray.init), which gymflow keeps off: Ray binds "
            "the machine's outside address, so this server does not run under gymflow"
        )

    ray.init = refuse


def exit_with_parent(pid: int) -> None:
    """A gymflow killed with SIGTERM or SIGKILL cannot stop its server; the server notices."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


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


def resolved_fields(config_yaml: Path, instance: str, server: str, bindings: dict) -> dict:
    """The server's config block with OmegaConf's interpolations resolved, as NeMo Gym resolves
    it: `${oc.env:...}` from the environment, and the global keys (`policy_base_url`,
    `judge_model_name`, ...) from `bindings`, which take the place of the config's own."""
    import nemo_gym.global_config  # noqa: F401 (registers NeMo Gym's resolvers)
    from nemo_gym.global_config import NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config = OmegaConf.merge(OmegaConf.load(config_yaml), OmegaConf.create(bindings))
    # NeMo Gym's global config, as its launcher hands it to a server it starts: its own HTTP
    # client reads it (and would parse this process's command line without it)
    os.environ[NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME] = OmegaConf.to_yaml(config)
    block = OmegaConf.select(config, f"{instance}.resources_servers.{server}")
    if block is None:
        raise SystemExit(f"{config_yaml}: no resources_servers.{server} under {instance!r}")
    try:
        return OmegaConf.to_container(block, resolve=True)
    except OmegaConfBaseException as exc:
        raise SystemExit(
            f"{config_yaml}: {instance}.resources_servers.{server}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0]} (gymflow sets "
            f"{', '.join(sorted(bindings))}; set the rest in the environment)"
        ) from None


def model_servers(fields: object) -> set[str]:
    """The model servers a server's config block names (`judge_model_server: {type:
    responses_api_models, name: ...}`), at any depth."""
    if isinstance(fields, dict):
        named = {str(fields["name"])} if fields.get("type") == "responses_api_models" else set()
        return named.union(*(model_servers(v) for v in fields.values()))
    if isinstance(fields, list):
        return set().union(*(model_servers(v) for v in fields))
    return set()


def judge_client(judge_url: str, names: Iterable[str] = ()):
    """A NeMo Gym server client whose every call goes to gymflow's judge, or fails naming the
    setting when no judge is configured. Its global config places each model server the
    config names (`names`) at the judge's address, as NeMo Gym's launcher places each server
    it starts: a server that looks its judge up there before its first call (xstest polls
    it, then probes its `/v1/responses` at start) finds gymflow's judge."""
    from urllib.parse import urlsplit

    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient, request
    from omegaconf import OmegaConf
    from pydantic import BaseModel

    address = urlsplit(judge_url)
    placed = {
        name: {"responses_api_models": {"gymflow_judge": {
            "host": address.hostname, "port": address.port}}}
        for name in names
    } if judge_url else {}  # fmt: skip

    class JudgeClient(ServerClient):
        async def request(self, server_name, url_path, method, **kwargs):
            if not judge_url:
                raise RuntimeError(
                    f"this server asks a judge model ({server_name} {url_path}) and no judge is "
                    "configured: set verifier_params.judge (base_url, model) in the eval config"
                )
            if url_path not in ("/v1/responses", "/v1/chat/completions"):
                raise RuntimeError(
                    f"this server calls {server_name}{url_path}: under gymflow a server reaches "
                    "only a judge model (/v1/responses, /v1/chat/completions)"
                )
            if isinstance(kwargs.get("json"), BaseModel):
                kwargs["json"] = kwargs["json"].model_dump(exclude_unset=True)
            headers = {**(kwargs.pop("headers", None) or {}), ROLLOUT_HEADER: _ROLLOUT.get()}
            return await request(
                method=method, url=judge_url + url_path, _internal=True, headers=headers, **kwargs
            )

    return JudgeClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
        global_config_dict=OmegaConf.create(placed),
    )


def build_app(
    root: Path,
    server: str,
    config: Path,
    instance: str,
    port: int,
    bindings: dict | None = None,
    judge_url: str = "",
):
    """The server's FastAPI app, built as NeMo Gym's `run_webserver` builds it. Its folder is on
    the path too, as NeMo Gym runs it (`import utils` beside app.py)."""
    sys.path[:0] = [str((root / "resources_servers" / server).resolve()), str(root.resolve())]
    module = importlib.import_module(f"resources_servers.{server}.app")
    cls = _server_class(module)
    config_cls = cls.model_fields["config"].annotation
    fields = {
        **resolved_fields(config, instance, server, bindings or {}),
        "host": "127.0.0.1",
        "port": port,
        "name": instance,
    }
    client = judge_client(judge_url, model_servers(fields))
    built = cls(config=config_cls.model_validate(fields), server_client=client)
    app = built.setup_webserver()
    built.setup_liveness(app)
    built.setup_exception_middleware(app)
    _validation_handler(app)

    @app.middleware("http")
    async def rollout_id(request, call_next):  # registered last, so it runs first
        token = _ROLLOUT.set(request.headers.get(ROLLOUT_HEADER, ""))
        try:
            return await call_next(request)
        finally:
            _ROLLOUT.reset(token)

    return app, cls.__name__


def _validation_handler(app) -> None:
    """NeMo Gym's: a request its models reject is logged with its errors, then answered 422."""
    from fastapi.exception_handlers import request_validation_exception_handler
    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(RequestValidationError)
    async def handler(request, exc):
        print(f"Hit validation exception! Errors: {json.dumps(exc.errors(), default=str)[:4000]}")
        return await request_validation_exception_handler(request, exc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path, help="the folder holding resources_servers/")
    parser.add_argument("server")
    parser.add_argument("config", type=Path)
    parser.add_argument("instance")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-fd", type=int, default=None, help="where the port line goes")
    parser.add_argument("--bindings", default="{}", help="global config keys, as JSON")
    parser.add_argument("--judge-url", default="")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    args = parser.parse_args()
    if args.parent_pid:
        exit_with_parent(args.parent_pid)
    keep_ray_off(args.server)
    keep_network_off(args.server)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app, name = build_app(
        args.root, args.server, args.config, args.instance, port,
        json.loads(args.bindings), args.judge_url,
    )  # fmt: skip

    import uvicorn

    sock.listen(128)
    line = json.dumps({"port": port, "server": name}) + "\n"
    if args.port_fd is None:
        print(line, end="", flush=True)
    else:
        os.write(args.port_fd, line.encode())
        os.close(args.port_fd)
    # the asyncio loop, not uvloop: its sockets go through the guarded `socket` calls
    uvicorn.Server(uvicorn.Config(app, log_level="warning", loop="asyncio")).run(sockets=[sock])


if __name__ == "__main__":
    main()
