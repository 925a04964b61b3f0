"""The one root of every error gymflow reports, and its branches by what the user does next.

The CLI catches `GymflowError` alone: it prints the message as one `error:` line and exits with
the class's `exit_code` (the codes of `gymflow.cli.exit_codes`). Any other exception escaping a
command is a gymflow bug, and the CLI prints its traceback. A core module: it imports nothing
from gymflow, so every package may raise these."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from contextvars import ContextVar
from typing import ClassVar


class GymflowError(Exception):
    """An error gymflow reports to the user in one line; never raised itself, only a branch."""

    #: The process exit code when this error ends a command (`gymflow.cli.exit_codes`).
    exit_code: ClassVar[int] = 3

    # The message as raised, whatever the second base: a KeyError's own str() would quote it.
    __str__ = Exception.__str__


class UserError(GymflowError):
    """Bad usage, config or input: a flag, a file, a name or a store the message names. Nothing
    was run or written; fixing what the message says fixes it."""

    exit_code: ClassVar[int] = 1


class GateFailed(GymflowError):
    """The command ran and its verdict is negative (a gate found a regression)."""

    exit_code: ClassVar[int] = 2


class RuntimeFailure(GymflowError):
    """A failure while running: a server, a model, a worker or a shard failed. What finished is
    kept; a retry (`--resume`) continues."""

    exit_code: ClassVar[int] = 3


#: How messages name a run's options: `flags` (the `gym` command's) or `form` (a flow run's
#: parameters, as the Prefect UI's form shows them). The CLI says `flags` before it starts a
#: flow; a flow run no command started names its form's fields.
_option_names: ContextVar[str | None] = ContextVar("gymflow_option_names", default=None)

#: A run option's field in the eval-run form, by its name.
_FORM_FIELDS = {
    "out": "the form's config.out field",
    "resume": "the form's resume field, or Retry on this flow run",
}


def option(name: str) -> str:
    """How a message names the run option `name` (`out`, `resume`) to whoever reads it."""
    if _option_names.get() == "form":
        return _FORM_FIELDS[name]
    return f"--{name.replace('_', '-')}"


@contextlib.contextmanager
def naming_options(names: str, *, unless_set: bool = False) -> Generator[None, None, None]:
    """While inside, messages name options as `names` says (`flags` or `form`); with
    `unless_set`, only if nobody outside chose already (a flow run started by the CLI)."""
    if unless_set and _option_names.get() is not None:
        yield
        return
    token = _option_names.set(names)
    try:
        yield
    finally:
        _option_names.reset(token)
