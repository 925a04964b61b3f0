"""`gym env prepare ng-NAME ... | --all`: NeMo Gym servers' own requirements, installed."""

from __future__ import annotations

from typing import Annotated

import typer

from gymflow.cli import exit_codes
from gymflow.cli.app import console, env_app, fail
from gymflow.environments.nemo_gym.folder import PATH_VARIABLE, nemo_servers
from gymflow.environments.nemo_gym.prepare import PrepareError, prepare


@env_app.command("prepare")
def prepare_servers(
    names: Annotated[
        list[str] | None, typer.Argument(help="NeMo Gym environments, ng-NAME.")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every NeMo Gym environment listed.")
    ] = False,
) -> None:
    """Install NeMo Gym servers' own requirements into their venvs (cached). `gym eval run`
    does it too, for the server it starts. A server that cannot be prepared is bad input
    (exit 1)."""
    servers = nemo_servers()
    if not servers:
        fail(f"no NeMo Gym environment found: set {PATH_VARIABLE}")
    if every == bool(names):
        fail("name NeMo Gym environments (ng-NAME) or give --all")
    unknown = sorted(set(names or ()) - set(servers))
    if unknown:
        fail(f"not NeMo Gym environments: {', '.join(unknown)} (see `gym list environments`)")
    chosen = [servers[n] for n in names] if names else list(servers.values())
    done: set = set()
    refused = 0
    for server in chosen:
        if server.folder in done:  # one venv per server folder, whatever its configs
            continue
        done.add(server.folder)
        try:
            ready = prepare(server, say=lambda text: console.print(text, highlight=False))
        except PrepareError as exc:
            refused += 1
            console.print(f"{server.env_name}: refused: {exc}", highlight=False)
            continue
        if not ready.installed:
            console.print(f"{server.env_name}: needs nothing beyond nemo-gym", highlight=False)
        elif ready.cached:
            built = f"{', '.join(ready.installed)}; built in {ready.seconds} s"
            console.print(f"{server.env_name}: ready ({built})", highlight=False)
    if refused:
        raise typer.Exit(exit_codes.BAD_INPUT)
