"""Whether a process still runs, for leftovers named by the PID of the process that made them
(sandbox scratch folders, staged imports, the local Prefect server), whether a child server
answers yet, and what environment a child process gymflow starts is given (`child_env`)."""

from __future__ import annotations

import http.client
import os
from urllib.parse import urlsplit

from gymflow.core.credentials import SEAL_KEY_ENV


def pid_alive(pid: int) -> bool:
    """True while a process with this PID exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def answers_ok(url: str, timeout: float = 1.0) -> bool:
    """True when a plain-HTTP GET of `url` (a child server's health route) answers 200. Through
    http.client, not httpx: an httpx client builds an SSL context first (0.2-0.7 s, even for an
    http:// URL), which polling a server that is starting paid on every try."""
    parts = urlsplit(url)
    if not parts.hostname:  # nothing answers a URL without a host
        return False
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


#: What every child process gymflow starts outside a sandbox (a server, a verifier worker, a
#: tool) is given of gymflow's environment by name: where it finds programs, libraries and
#: certificates, whose home and locale it runs in, the proxy to reach the network through.
CHILD_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
    "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)  # fmt: skip
#: ... and by prefix: the locale's parts and the user's folders.
CHILD_ENV_PREFIXES = ("LC_", "XDG_")
#: Further variables (comma-separated names) the user gives every such child: a server that
#: documents it needs one (a token for a gated dataset, say) gets it only when named here.
PASS_VARIABLE = "GYMFLOW_CHILD_ENV"
#: Words of a variable's name that mark a credential: never passed by a prefix, only by name.
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


def child_env(
    *,
    prefixes: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
    set_to: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a child process gymflow starts outside a sandbox, built from an
    allow-list, never inherited whole: `CHILD_ENV`, the variables starting with
    `CHILD_ENV_PREFIXES` or the caller's `prefixes` (what that child documents it reads:
    `PREFECT_` for Prefect's server, `GYMFLOW_` for gymflow's own programs) unless their name
    holds a credential word, the caller's `names` and those the user lists in
    `GYMFLOW_CHILD_ENV`, then `set_to`. Never gymflow's seal key, whoever names it. A NeMo Gym
    server started with gymflow's whole environment gave the rows' test code the owner's API
    keys and seal key (attack pass 8, F4). A sandbox clears its own program's environment."""
    named = {*CHILD_ENV, *names, *os.environ.get(PASS_VARIABLE, "").replace(" ", "").split(",")}
    chosen = tuple(CHILD_ENV_PREFIXES + prefixes)
    env = {
        key: value
        for key, value in os.environ.items()
        if key in named
        or (key.startswith(chosen) and not any(word in key.upper() for word in SECRET_WORDS))
    }
    env.update(set_to or {})
    env.pop(SEAL_KEY_ENV, None)
    return env
