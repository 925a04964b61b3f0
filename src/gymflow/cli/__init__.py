"""The `gym` command. Each verb group lives in its own module of this package and registers its
commands on the Typer apps of `gymflow.cli.app` when imported; every module here is imported."""

from __future__ import annotations

import importlib
import pkgutil

from gymflow.cli.app import app

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def main() -> None:
    app()
