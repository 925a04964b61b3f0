"""The `gym` command (also installed as `gymflow`). Each verb group lives in its own module of
this package and registers its commands on the Typer apps of `gymflow.cli.app` when imported;
every module here is imported."""

from __future__ import annotations

import importlib
import pkgutil

import duckdb
from rich.text import Text

from gymflow.cli.app import app, errors

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "__main__":  # `python -m gymflow.cli`, which imports this package
        importlib.import_module(f"{__name__}.{_module.name}")


def main() -> None:
    try:
        app()
    except duckdb.IOException as exc:
        # A store whose header opened but whose data blocks cannot be read: cut short on disk.
        errors.print(
            Text("error: ", style="bold red")
            + Text(f"store unreadable (truncated or corrupt?): {exc}"),
            highlight=False,
        )
        raise SystemExit(1) from None
