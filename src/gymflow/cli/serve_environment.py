"""`gym serve environment NAME --port P`: an environment's resources server on its own port."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from gymflow.cli.app import console, fail, serve_app
from gymflow.core import bounded_yaml
from gymflow.core.user_folders import private_folder, user_state
from gymflow.environments.asgi import MAX_SESSIONS, SESSION_IDLE_S
from gymflow.environments.registry import load_environment
from gymflow.present.terminal import styled

#: Shortest access key accepted from --key-env: a short one can be guessed over the network.
MIN_KEY_CHARS = 16


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


def _access_key(key_env: str | None, key_file: Path | None, port: int) -> tuple[str, str]:
    """The server's access key, and where it came from (said on the terminal: never the key).
    From the variable --key-env names; else a new random one, written mode 0600 to --key-file
    (default: a file in the user's private state folder) for the clients to read."""
    if key_env is not None:
        key = os.environ.get(key_env, "")
        if len(key) < MIN_KEY_CHARS:
            fail(
                f"--key-env {key_env}: the variable is "
                f"{'not set' if not key else f'shorter than {MIN_KEY_CHARS} characters'} here; "
                "export the access key in it (e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'), or leave --key-env out for a new key"
            )
        return key, f"from ${key_env}"
    if key_file is None:
        folder = user_state("keys")
        if not private_folder(folder, create=True):
            fail(f"{folder}: not a private folder of this user; give --key-file or --key-env")
        key_file = folder / f"environment-{port}.key"
    key = secrets.token_urlsafe(32)
    partial = key_file.with_name(f".{key_file.name}.{os.getpid()}")
    try:  # made 0600 before the key is in it, then renamed over an older one
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
        os.replace(partial, key_file)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        fail(f"{key_file}: cannot write the access key: {exc.strerror or exc}")
    return key, f"written to {key_file} (mode 0600)"


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
    key_env: Annotated[
        str | None,
        typer.Option(
            help="Environment variable holding the access key every client must send. Unset: "
            "a new random key, written to --key-file."
        ),
    ] = None,
    key_file: Annotated[
        Path | None,
        typer.Option(
            help="Where a new access key is written (mode 0600). Default: "
            "~/.local/state/gymflow/keys/environment-PORT.key."
        ),
    ] = None,
) -> None:
    """Serve POST /seed_session, /tools/{name}, /verify and GET /health over HTTP."""
    import uvicorn

    from gymflow.environments.asgi import create_app
    from gymflow.models.open_files import ensure_serving_open_files

    server = load_environment(name).resources_server(_verifier_params(param or []))
    key, source = _access_key(key_env, key_file, port)
    console.print(
        styled(
            "serving environment ",
            (name, "bold"),
            f" ({server.verifier_version}) on http://{host}:{port}",
        ),
        highlight=False,
    )
    console.print(
        styled(
            f"access key {source}: clients send it from the variable their config's "
            "resources_key_env names"
        ),
        highlight=False,
    )
    app = create_app(
        server, max_sessions=max_sessions, session_idle_s=session_idle_s, access_key=key
    )
    ensure_serving_open_files()  # a socket per client connection, however many come
    uvicorn.run(app, host=host, port=port, log_level="warning")
