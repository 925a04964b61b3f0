"""`gym serve environment NAME --port P`: an environment's resources server on its own port."""

from __future__ import annotations

from typing import Annotated, Any

import typer
import yaml

from gymflow import bounded_yaml
from gymflow.cli.app import console, fail, serve_app
from gymflow.environments.asgi import MAX_SESSIONS, SESSION_IDLE_S
from gymflow.environments.registry import load_environment
from gymflow.present.terminal import styled


def _verifier_params(pairs: list[str]) -> dict[str, Any]:
    """key=value pairs, each value read as YAML: `timeout_s=5` and `ignore=[]` keep their types."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--param {pair!r}: expected key=value")
        try:
            params[key] = bounded_yaml.safe_load(value)
        except yaml.YAMLError:
            params[key] = value
    return params


@serve_app.command("environment")
def serve_environment(
    name: Annotated[str, typer.Argument(help="Environment name (see `gym list environments`).")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8100,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    param: Annotated[
        list[str] | None, typer.Option(help="Verifier parameter override, key=value.")
    ] = None,
    max_sessions: Annotated[
        int,
        typer.Option(min=1, help="Sessions open at once; a seed past it is a 503 saying so."),
    ] = MAX_SESSIONS,
    session_idle_s: Annotated[
        float,
        typer.Option(min=1.0, help="Seconds a session may go untouched before it is closed."),
    ] = SESSION_IDLE_S,
) -> None:
    """Serve POST /seed_session, /tools/{name}, /verify and GET /health over HTTP."""
    import uvicorn

    from gymflow.environments.asgi import create_app
    from gymflow.models.open_files import ensure_serving_open_files

    server = load_environment(name).resources_server(_verifier_params(param or []))
    console.print(
        styled(
            "serving environment ",
            (name, "bold"),
            f" ({server.verifier_version}) on http://{host}:{port}",
        ),
        highlight=False,
    )
    app = create_app(server, max_sessions=max_sessions, session_idle_s=session_idle_s)
    ensure_serving_open_files()  # a socket per client connection, however many come
    uvicorn.run(app, host=host, port=port, log_level="warning")
