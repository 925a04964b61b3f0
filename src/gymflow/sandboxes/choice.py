"""The sandboxes by the name `harness.sandbox` gives them."""

from __future__ import annotations

from gymflow.core.errors import UserError
from gymflow.sandboxes.base import Sandbox
from gymflow.sandboxes.bubblewrap import BubblewrapSandbox
from gymflow.sandboxes.container import DockerSandbox, PodmanSandbox

SANDBOXES: dict[str, type[Sandbox]] = {
    kind.name: kind for kind in (BubblewrapSandbox, DockerSandbox, PodmanSandbox)
}


def sandbox_kind(name: str) -> type[Sandbox]:
    try:
        return SANDBOXES[name]
    except KeyError:
        known = ", ".join(sorted(SANDBOXES))
        raise UserError(f"harness.sandbox: unknown sandbox {name!r} (known: {known})") from None
