"""Prompt templates are Jinja, rendered in a bounded sandbox with undefined names as errors."""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError

from gymflow.core.bounded_jinja import BoundedSandbox, RenderTimeout, render
from gymflow.core.errors import UserError

_JINJA = BoundedSandbox(undefined=StrictUndefined, keep_trailing_newline=False, autoescape=False)


class PromptError(UserError, ValueError):
    pass


class PromptTimeout(PromptError):
    """The template outlived its time bound: its own cost, so other rows need not be tried."""


@cache
def _compile(template: str):
    try:
        return _JINJA.from_string(template)
    except TemplateError as exc:
        raise PromptError(f"prompt template does not parse: {exc}") from None


def render_prompt(template: str, inputs: dict[str, Any]) -> str:
    try:
        return render(_compile(template), inputs)
    except RenderTimeout as exc:
        raise PromptTimeout(str(exc)) from None
    except TemplateError as exc:
        raise PromptError(str(exc)) from None
    except (
        ArithmeticError,
        TypeError,
        ValueError,
        LookupError,
        RecursionError,
        MemoryError,
    ) as exc:
        # what a template's own expressions raise (`1/0`, `range(10**9)`, a macro calling itself)
        raise PromptError(f"{type(exc).__name__}: {exc}") from None
