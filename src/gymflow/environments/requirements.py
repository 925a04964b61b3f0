"""Python packages an environment's data comes from, and what to install when one is absent.

An environment declares them in `environment.yaml` (`requires: [{module, install}]`). They are
checked before its tasks load, so a missing package is one line saying what to install (at run
time, and as a marker in `gym list benchmarks`), never a ModuleNotFoundError traceback."""

from __future__ import annotations

import importlib.util

from pydantic import BaseModel, ConfigDict

from gymflow.core.errors import UserError


class Requirement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    module: str  # the importable name, e.g. bfcl_eval
    install: str  # the command that installs it, e.g. pip install --no-deps bfcl-eval


class MissingPackage(UserError, ValueError):
    """An environment's data package is not installed; the message says what to install."""


def is_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(requires: list[Requirement]) -> list[Requirement]:
    return [req for req in requires if not is_installed(req.module)]


def install_hint(requires: list[Requirement]) -> str | None:
    """The commands that install what is missing, or None when everything is installed."""
    absent = missing(requires)
    return "; ".join(req.install for req in absent) if absent else None


def check_installed(environment: str, requires: list[Requirement]) -> None:
    absent = missing(requires)
    if absent:
        names = ", ".join(req.module for req in absent)
        raise MissingPackage(
            f"environment {environment!r} needs the Python package {names}, which is not "
            f"installed: run `{'; '.join(req.install for req in absent)}`"
        )
