"""The `gym` command. Each verb group lives in its own module and registers itself here."""

from __future__ import annotations

from gymflow.cli import analysis, evaluate  # noqa: F401  (register commands)
from gymflow.cli.app import app


def main() -> None:
    app()
